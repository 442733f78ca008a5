"""End to end, transparent mode, against a sandbox that forges request-targets
(issue 10, items 1 and 7; docs/configuration.md#modes-and-protocols; docs/decisions.md D20, D23).

The fixtures are those of tests/e2e/test_transparent_e2e.py (its own topology, proxy
and upstreams, built once per module): the sandbox aims at an address, names a host
in SNI and Host, and puts a third name in the request-target.
"""

from __future__ import annotations

import json
import ssl

import pytest

from testbed.expect import assert_refused, header_values
from testbed.h2client import exchange
from testbed.rawhttp import Conn
from testbed.transparent import DECOY_IP, REAL_IP
from tests.e2e.test_transparent_e2e import Seen, Transparent, listener, seen, tp

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]
__all__ = ["seen", "tp"]  # fixtures, imported so that pytest finds them here


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("http://notlisted.t.test/x", "host_mismatch"),
        ("http://api.t.test/x", "host_mismatch"),
        ("http://other.t.test:8080/x", "host_mismatch"),
    ],
)
def test_plain_http_target_that_disagrees_with_the_host_is_refused(
    tp: Transparent, seen: Seen, target: str, reason: str
):
    with tp.plain(DECOY_IP) as conn:
        response = tp.request(conn, "other.t.test", target)

    assert_refused(response, reason)
    seen.assert_nothing_reached()


def test_plain_http_absolute_target_naming_the_host_is_sent_in_origin_form(
    tp: Transparent, seen: Seen
):
    with tp.plain(DECOY_IP) as conn:
        response = tp.request(conn, "other.t.test", "http://other.t.test/tp-abs?x=1")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 80))
    assert record["target"] == "/tp-abs?x=1"
    assert header_values(record, "Host") == ["other.t.test"]


def test_tls_target_naming_another_host_than_the_sni_is_host_mismatch(tp: Transparent, seen: Seen):
    with tp.tls(REAL_IP, "api.t.test") as conn:
        response = tp.request(conn, "api.t.test", "https://evil.test/x")

    assert_refused(response, "host_mismatch")
    seen.assert_nothing_reached()


def test_tls_target_naming_the_sni_host_is_sent_in_origin_form_with_the_transform(
    tp: Transparent, seen: Seen
):
    with tp.tls(REAL_IP, "api.t.test") as conn:
        response = tp.request(conn, "api.t.test", "https://api.t.test/tp-abs-tls")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert record["target"] == "/tp-abs-tls"
    assert header_values(record, "Authorization") == [f"Bearer {tp.secret}"]


def test_http2_path_naming_another_host_is_host_mismatch(tp: Transparent, seen: Seen):
    headers = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "api.t.test"),
        (":path", "http://evil.test/x"),
    ]
    with tp.tls(REAL_IP, "api.t.test", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(conn.sock, [headers])

    assert result.ended == {1}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", "host_mismatch")
    assert json.loads(result.bodies[1])["reason"] == "host_mismatch"
    seen.assert_nothing_reached()


def test_sni_that_does_not_parse_is_bad_request(tp: Transparent, seen: Seen):
    # An empty label: mitmproxy reads it as "no SNI"; REAL_IP/32 opens port 443 by address,
    # so without the check the request went to the original destination.
    ctx = ssl.create_default_context(cafile=str(tp.proxy_ca))
    ctx.check_hostname = False
    sock = tp.socket(REAL_IP, 443)
    with Conn.over(ctx.wrap_socket(sock, server_hostname=b"api..t.test")) as conn:  # type: ignore[arg-type]
        response = tp.request(conn, "api.t.test", "/bad-sni")

    assert_refused(response, "bad_request")
    seen.assert_nothing_reached()


def test_plain_http_absolute_target_without_a_host_header_names_the_host(
    tp: Transparent, seen: Seen
):
    # HTTP/1.0 needs no Host: the target's authority names the host, and the upstream gets
    # it as Host with an origin-form target (D20).
    with tp.plain(DECOY_IP) as conn:
        conn.send(b"GET http://other.t.test/no-host HTTP/1.0\r\n\r\n")
        response = conn.read_response()

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 80))
    assert record["target"] == "/no-host"
    assert header_values(record, "Host") == ["other.t.test"]


@pytest.mark.parametrize(
    "field", [b"X-A: b\rHost: api.t.test", b"X-F: one\r\n two", b"X-N: a\x00b"]
)
def test_header_value_with_forbidden_bytes_is_bad_request(
    tp: Transparent, seen: Seen, field: bytes
):
    with tp.plain(DECOY_IP) as conn:
        conn.send(b"GET /tp-hdr HTTP/1.1\r\nHost: other.t.test\r\n" + field + b"\r\n\r\n")
        response = conn.read_response()

    assert_refused(response, "bad_request")
    seen.assert_nothing_reached()
