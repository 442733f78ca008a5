"""What reaches an upstream, end to end (issue 21): the sandbox does not choose what is
scanned, and connection-only fields stop at the proxy."""

from __future__ import annotations

import pytest

from testbed.expect import Observed, header_values
from testbed.harness import Harness
from testbed.rawhttp import Conn

pytestmark = pytest.mark.netns


def masked(length: int) -> bytes:
    return b"[redacted" + b"*" * (length - 10) + b"]"


@pytest.mark.parametrize("asked", ["gzip", "gzip, deflate, br", "*", "GZIP;q=1"])
def test_a_sandbox_asking_for_gzip_still_gets_its_echo_redacted(
    harness: Harness, obs: Observed, asked: str
):
    # issue 21: with Accept-Encoding: gzip the compressed echo carried the injected token.
    response = harness.https(
        "api.allowed.test:443", "/echo-compressed?name=X-Api-Key", [("Accept-Encoding", asked)]
    )

    upstream = obs.only_request()
    assert header_values(upstream, "Accept-Encoding") == ["identity"]
    injected = header_values(upstream, "X-Api-Key")
    assert len(injected) == 1 and harness.secrets[0] in injected[0]
    assert response.status == 200, response.describe()
    assert response.header("Content-Encoding") is None
    assert response.body == b'{"echoed": "' + masked(len(injected[0])) + b'"}'


def test_an_upstream_compressing_anyway_is_not_forwarded(harness: Harness, obs: Observed):
    with harness.tunnel("api.allowed.test:443") as conn:
        conn.send(
            b"GET /echo-compressed?name=X-Api-Key&force=1 HTTP/1.1\r\n"
            b"Host: api.allowed.test\r\n\r\n"
        )
        received = read_until_closed(conn)

    assert obs.only_request()["target"] == "/echo-compressed?name=X-Api-Key&force=1"
    assert b"HTTP/1.1 200" not in received  # the answer was dropped, not forwarded
    assert harness.secrets[0].encode() not in received


def read_until_closed(conn: Conn) -> bytes:
    """Every byte the proxy sends until it closes or resets the connection."""
    received = b""
    for _ in range(1000):
        try:
            chunk = conn.sock.recv(65536)
        except OSError:  # a reset, or TLS ended without close_notify
            break
        if not chunk:
            break
        received += chunk
    return received


def test_connection_only_fields_and_name_variants_stop_at_the_proxy(
    harness: Harness, obs: Observed
):
    response = harness.https(
        "api.allowed.test:443",
        "/hop",
        [
            ("Proxy-Authorization", "Basic c2J4OnRva2Vu"),
            ("Proxy-Connection", "keep-alive"),
            ("Keep-Alive", "timeout=5"),
            ("Connection", "keep-alive, X-Private, Authorization"),
            ("X-Private", "private"),
            ("TE", "gzip"),
            ("X_Api_Key", "sandbox-chosen"),
            ("x-api-key", "sandbox-chosen"),
            ("X-Kept", "1"),
        ],
    )

    assert response.status == 200, response.describe()
    upstream = obs.only_request()
    names = [name.lower() for name, _ in upstream["headers"]]
    for gone in ("proxy-authorization", "proxy-connection", "keep-alive", "x-private", "te"):
        assert gone not in names
    assert "x_api_key" not in names
    assert names.count("x-api-key") == 1 and names.count("authorization") == 1
    assert harness.secrets[0] in header_values(upstream, "Authorization")[0]
    assert header_values(upstream, "X-Kept") == ["1"]
