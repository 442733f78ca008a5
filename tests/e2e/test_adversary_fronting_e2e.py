"""End to end, regular mode, against a sandbox that forges request-targets and header bytes
(issue 10, items 1, 4 and 7; docs/configuration.md#destinations-always-refused; docs/configuration.md#modes-and-protocols).

* Fronting through the request-target: inside a tunnel to a transform host, an
  absolute-form target (HTTP/1) or a non-origin `:path` (HTTP/2) that names another host
  is `host_mismatch`; one that is neither origin-form, nor absolute-form, nor `*` for
  OPTIONS is `bad_request`; an absolute-form target naming the decided host reaches the
  upstream in origin-form (docs/decisions.md D20).
* Header bytes RFC 9112 forbids a proxy to forward (bare CR, obs-fold, NUL, controls,
  a method that is not a token) are `bad_request` and nothing reaches an upstream (D21).
* A ClientHello whose SNI does not parse is `bad_request`, not a tunnel without the
  SNI/CONNECT agreement check (D23).

Transparent mode: tests/e2e/test_adversary_transparent_e2e.py; the proxy's own addresses
and reloads during a lookup: tests/e2e/test_adversary_self_e2e.py.
"""

from __future__ import annotations

import json

import pytest

from testbed.expect import Observed, assert_refused, header_values
from testbed.h2client import exchange
from testbed.harness import Harness

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

API = "api.allowed.test"  # transform entry: Authorization and X-Api-Key are injected


def _secret_headers(record: dict[str, object]) -> list[str]:
    return header_values(record, "Authorization") + header_values(record, "X-Api-Key")


# -- HTTP/1 request-targets inside an intercepted tunnel ------------------------------------


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("https://evil.test/x", "host_mismatch"),  # the reproduction
        ("https://notlisted.test/x", "host_mismatch"),
        ("http://evil.test/x", "host_mismatch"),
        ("https://api.allowed.test:8443/x", "host_mismatch"),  # the tunnel's host, another port
        ("https://API.ALLOWED.TEST.evil.test/x", "host_mismatch"),
        ("*", "bad_request"),  # asterisk-form is for OPTIONS only
        ("/x\x7f", "bad_request"),  # DEL in the target
        ("/x\x01y", "bad_request"),  # a control byte in the target
        ("/caf\xe9", "bad_request"),  # a byte outside US-ASCII
        ("/x#frag", "bad_request"),  # a fragment is never part of a request-target
        ("https://api.allowed.test@evil.test/x", None),  # mitmproxy's reader: 400
        ("https://evil.test#@api.allowed.test/x", None),
        ("evil.test/x", None),
    ],
)
def test_http1_target_that_names_another_host_or_is_malformed_is_refused(
    harness: Harness, obs: Observed, target: str, reason: str | None
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", target, [("Host", API)]))

    if reason is None:  # mitmproxy refuses the request line before any hook runs
        assert response.status == 400, response.describe()
    else:
        assert_refused(response, reason)
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("target", "upstream_target"),
    [
        ("https://api.allowed.test/x?q=1", "/x?q=1"),
        ("https://API.allowed.test:443/y", "/y"),
        ("https://api.allowed.test", "/"),
        ("/plain/origin?form", "/plain/origin?form"),
    ],
)
def test_http1_target_naming_the_tunnel_host_reaches_the_upstream_in_origin_form(
    harness: Harness, obs: Observed, target: str, upstream_target: str
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", target, [("Host", API)]))

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["target"] == upstream_target
    assert header_values(record, "Host") == [API]
    assert _secret_headers(record) == [
        f"Bearer {harness.secrets[0]}",
        harness.secrets[0],
    ]


def test_options_asterisk_reaches_the_upstream_as_asterisk(harness: Harness, obs: Observed):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("OPTIONS", "*", [("Host", API)]))

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "*"


def test_plain_tunnel_absolute_target_naming_another_host_is_host_mismatch(
    harness: Harness, obs: Observed
):
    # A CONNECT tunnel that carries plain HTTP (no TLS inside): the same rule.
    with harness.conn() as conn:
        assert conn.connect("plain.allowed.test:80").status == 200
        response = harness.remember(
            conn.request("GET", "http://evil.test/x", [("Host", "plain.allowed.test")])
        )

    assert_refused(response, "host_mismatch")
    obs.assert_nothing_reached()


def test_plain_tunnel_absolute_target_naming_the_host_is_sent_in_origin_form(
    harness: Harness, obs: Observed
):
    with harness.conn() as conn:
        assert conn.connect("other.allowed.test:80").status == 200
        response = harness.remember(
            conn.request("GET", "http://other.allowed.test/z?k=v", [("Host", "other.allowed.test")])
        )

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "/z?k=v"


def test_regular_plain_http_absolute_form_reaches_the_upstream_in_origin_form(
    harness: Harness, obs: Observed
):
    response = harness.plain("http://other.allowed.test/p/q?r=s")

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "/p/q?r=s"


# -- HTTP/2 :path ---------------------------------------------------------------------------


def _h2(path: str, method: str = "GET", authority: str = API) -> list[tuple[str, str]]:
    return [
        (":method", method),
        (":scheme", "https"),
        (":authority", authority),
        (":path", path),
    ]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("http://evil.test/x", "host_mismatch"),  # the reproduction
        ("https://evil.test/x", "host_mismatch"),
        ("https://api.allowed.test:8443/x", "host_mismatch"),
        ("evil.test/x", "bad_request"),  # neither origin- nor absolute-form
        ("*", "bad_request"),  # asterisk-form for GET
        ("https://user@api.allowed.test/x", "bad_request"),  # userinfo
        ("ftp://api.allowed.test/x", "bad_request"),  # not an http(s) URI
        ("https:///x", "bad_request"),  # empty authority
        ("/x y", "bad_request"),  # a space inside :path
        # parser-differential spellings: whoever reads the authority, it is not the host's
        ("https://api.allowed.test@evil.test/x", "bad_request"),
        ("https://api.allowed.test:443@evil.test/x", "bad_request"),
        ("https://evil.test\\@api.allowed.test/x", "bad_request"),
        ("https://evil.test%2f@api.allowed.test/x", "bad_request"),
        ("https://evil.test#@api.allowed.test/x", "bad_request"),
        ("https://evil.test?@api.allowed.test/x", "host_mismatch"),  # evil.test, query "@..."
        ("https://[::1]/x", "host_mismatch"),
        ("HTTPS://EVIL.TEST/x", "host_mismatch"),
    ],
)
def test_http2_path_that_is_not_origin_form_for_the_tunnel_host_is_refused(
    harness: Harness, obs: Observed, path: str, reason: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(conn.sock, [_h2(path)])

    assert result.ended == {1}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", reason)
    assert json.loads(result.bodies[1])["reason"] == reason
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("path", "method", "upstream_target"),
    [
        ("https://api.allowed.test/h2?abs=1", "GET", "/h2?abs=1"),
        ("https://api.allowed.test:443", "GET", "/"),
        ("https://api.allowed.test?q", "GET", "/?q"),
        ("*", "OPTIONS", "*"),
    ],
)
def test_http2_absolute_path_naming_the_tunnel_host_is_sent_in_origin_form(
    harness: Harness, obs: Observed, path: str, method: str, upstream_target: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [_h2(path, method)])

    assert result.ended == {1}, result
    assert result.status(1) == "200", result
    record = obs.only_request()
    assert record["target"] == upstream_target
    assert header_values(record, "Host") == [API]
    assert _secret_headers(record) == [
        f"Bearer {harness.secrets[0]}",
        harness.secrets[0],
    ]


# -- an SNI that does not parse (D23) -------------------------------------------------------


@pytest.mark.parametrize("sni", ["999.1.2.3", "api..allowed.test"])
def test_sni_that_does_not_parse_is_bad_request_inside_the_tunnel(
    harness: Harness, obs: Observed, sni: str
):
    # Python's ssl refuses to IDNA-encode an empty label, but sends ASCII bytes as they are.
    with harness.tunnel(f"{API}:443", sni=sni.encode(), check_hostname=False) as conn:  # type: ignore[arg-type]
        response = harness.remember(conn.request("GET", "/bad-sni", [("Host", API)]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


# -- header bytes a proxy must not forward (D21) --------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        ("X-A", "b\rHost: evil.test"),  # bare CR: a lenient upstream sees a second Host
        ("X-Fold", "one\r\n Transfer-Encoding: chunked"),  # obs-fold (SP)
        ("X-Fold", "one\r\n\ttwo"),  # obs-fold (HTAB)
        ("X-Nul", "a\x00b"),
        ("X-Ctl", "a\x01b"),
        ("X-Del", "a\x7fb"),
        ("X-Vt", "a\x0bb"),
    ],
    ids=["bare-cr", "obs-fold-sp", "obs-fold-tab", "nul", "ctl", "del", "vt"],
)
def test_http1_header_value_with_forbidden_bytes_is_bad_request(
    harness: Harness, obs: Observed, field: tuple[str, str]
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", "/hdr", [("Host", API), field]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


def test_plain_proxy_request_with_a_bare_cr_is_bad_request(harness: Harness, obs: Observed):
    response = harness.plain(
        "http://other.allowed.test/hdr", [("X-A", "b\rHost: api.allowed.test")]
    )

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("method", ["GET(", "GET\x00", "GET\x7f", "GET\xc9", "GET@X"])
def test_method_that_is_not_a_token_is_bad_request(harness: Harness, obs: Observed, method: str):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request(method, "/m", [("Host", API)]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("name", ["X\x00Y", "Host ", "X(Y", "X\x01"])
def test_http1_header_name_that_is_not_a_token_never_reaches_the_policy(
    harness: Harness, obs: Observed, name: str
):
    # mitmproxy's own check (validate_inbound_headers, kept on) answers 400 before any
    # hook runs, in the product's JSON (D354); the policy's check would refuse it too.
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", "/n", [("Host", API), (name, "v")]))

    assert_refused(response, "bad_request", status=400)
    assert response.header("Server") is None
    obs.assert_nothing_reached()


@pytest.mark.parametrize("value", ["a\x01b", "a\x7fb", "a\x1bb"], ids=["ctl", "del", "esc"])
def test_http2_header_value_with_a_control_byte_is_bad_request(
    harness: Harness, obs: Observed, value: str
):
    # h2 itself rejects NUL, CR and LF; the other control bytes reach the policy.
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [[*_h2("/h2-ctl"), ("x-ctl", value)]])

    assert result.ended == {1}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("value", ["a\x00b", "a\rb", "a\nhost: evil.test"], ids=["nul", "cr", "lf"])
def test_http2_header_value_with_nul_cr_or_lf_never_reaches_an_upstream(
    harness: Harness, obs: Observed, value: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [[*_h2("/h2-nul"), ("x-bad", value)]], timeout=5.0)

    assert result.status(1) is None, result  # h2 refuses the header block: no response
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("authority", "data"),
    [
        (f"{API}:443", b"G(T /m HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"),
        (f"{API}:443", b"\x00GET /m HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"),
        ("other.allowed.test:80", b"SSH-2.0-OpenSSH_9.6 sandbox\r\n"),
        ("other.allowed.test:80", b"G(T /m HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"),
    ],
    ids=["tls-not-a-method", "tls-leading-nul", "plain-ssh", "plain-not-a-method"],
)
def test_bytes_that_are_not_http_inside_a_tunnel_to_a_name_are_closed(
    harness: Harness, obs: Observed, authority: str, data: bytes
):
    # mitmproxy relays what does not start like an HTTP method as raw TCP; raw TCP inside
    # a CONNECT to a name is refused (D9), so the connection closes and nothing is relayed.
    with harness.conn() as conn:
        assert conn.connect(authority).status == 200
        if authority.endswith(":443"):
            ctx = harness.client_tls()
            conn.start_tls(ctx, API)
        conn.send(data)
        received = b""
        try:
            while chunk := conn.sock.recv(4096):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass

    assert received == b"", received
    obs.assert_nothing_reached()
