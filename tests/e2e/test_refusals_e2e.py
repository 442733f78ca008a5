"""End to end, every refusal the proxy makes in regular mode: the exact status, header,
reason and body (docs/configuration.md#reason-codes), and proof that nothing reached the upstream or a trap.

Traps listen on [::]:80/443/8443 inside the proxy's namespace (so on 127.0.0.1, ::1 and
every other local address) and on the "internal" address 198.18.2.2 in the upstream
namespace: a proxy that connected where it must not would leave a record there.

Not reachable in regular mode with this configuration, so not here: `no_sni` (a CONNECT
always names the destination, and an IP/CIDR-opened address may go without SNI) and
`policy_error` (needs a fault inside the proxy).
"""

from __future__ import annotations

import ssl

import pytest

from testbed.expect import Observed, assert_refused
from testbed.harness import Harness, TunnelRefused

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

# Placeholder for the proxy's own address, which the topology picks at run time.
SELF = "{proxy}"

LOOPBACK_HOSTS = [
    "localhost",
    "LOCALHOST.",
    "foo.localhost",
    "rebind.test",  # an allowlisted name that resolves to 127.0.0.1
    "loop6.wild.test",  # an allowlisted name that resolves to ::1
    "127.0.0.1",
    "127.0.0.1.",
    "127.9.8.7",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "127.1",
    "0.0.0.0",
    "[::1]",
    "[::]",
    "[::ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "[64:ff9b::7f00:1]",
    "[2002:7f00:1::1]",
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",  # Teredo, client 127.0.0.1
]

# (URL, Host header or None for the URL's, status, reason, host expected in the body or None)
PLAIN_REFUSALS = [
    ("http://notlisted.test/r", None, 403, "not_allowlisted", "notlisted.test"),
    ("http://wild.test/r", None, 403, "not_allowlisted", "wild.test"),
    ("http://allowed.test/r", None, 403, "not_allowlisted", "allowed.test"),
    ("http://api.allowed.test.evil.test/r", None, 403, "not_allowlisted", None),
    ("http://evilallowed.test/r", None, 403, "not_allowlisted", None),
    ("http://internal.test/r", None, 403, "internal_address", "internal.test"),
    ("http://ports.allowed.test/r", None, 403, "port_not_allowed", "ports.allowed.test"),
    ("http://api.allowed.test/r", None, 403, "plaintext_credentials", "api.allowed.test"),
    ("http://missing.allowed.test/r", None, 502, "dns_failure", "missing.allowed.test"),
    ("http://other.allowed.test/r", "notlisted.test", 403, "host_mismatch", None),
    ("http://other.allowed.test/r", "plain.allowed.test", 403, "host_mismatch", None),
    ("http://other.allowed.test/r", "api.allowed.test", 403, "host_mismatch", None),
    ("http://[fe80::1%25eth0]/r", None, 403, "bad_request", None),
    (f"http://{SELF}:9464/metrics", None, 403, "proxy_host", None),
    (f"http://{SELF}:8080/", None, 403, "proxy_host", None),
    ("http://self.allowed.test:9464/metrics", None, 403, "proxy_host", None),
] + [(f"http://{host}/r", None, 403, "loopback", None) for host in LOOPBACK_HOSTS]

# (CONNECT authority, status, reason, host expected in the body or None)
CONNECT_REFUSALS = [
    ("notlisted.test:443", 403, "not_allowlisted", "notlisted.test"),
    ("wild.test:443", 403, "not_allowlisted", "wild.test"),
    ("internal.test:443", 403, "internal_address", "internal.test"),
    ("ports.allowed.test:443", 403, "port_not_allowed", "ports.allowed.test"),
    ("missing.allowed.test:443", 502, "dns_failure", "missing.allowed.test"),
    ("[fe80::1%eth0]:443", 403, "bad_request", None),
    (f"{SELF}:8080", 403, "proxy_host", None),
    (f"{SELF}:9464", 403, "proxy_host", None),
] + [(f"{host}:443", 403, "loopback", None) for host in LOOPBACK_HOSTS]

# Inside an intercepted tunnel: (CONNECT authority, Host header, reason)
TUNNEL_REFUSALS = [
    ("api.allowed.test:443", "other.allowed.test", "host_mismatch"),
    ("other.allowed.test:443", "api.allowed.test", "host_mismatch"),  # fronting for the token
    ("other.allowed.test:443", "notlisted.test", "host_mismatch"),
    ("api.allowed.test:443", "api.allowed.test:99999", "bad_request"),
    ("api.allowed.test:443", "user@api.allowed.test", "bad_request"),
    ("api.allowed.test:443", "api..allowed.test", "bad_request"),
]


def fill(text: str, harness: Harness) -> str:
    return text.replace(SELF, harness.proxy_host)


@pytest.mark.parametrize(("url", "host", "status", "reason", "body_host"), PLAIN_REFUSALS)
def test_plain_http_refusal(
    harness: Harness,
    obs: Observed,
    url: str,
    host: str | None,
    status: int,
    reason: str,
    body_host: str | None,
):
    url = fill(url, harness)
    headers = [("Authorization", "Bearer sandbox")]
    response = harness.plain(url, headers, host=host)

    assert_refused(response, reason, status, host=body_host)
    obs.assert_nothing_reached()


@pytest.mark.parametrize(("authority", "status", "reason", "body_host"), CONNECT_REFUSALS)
def test_connect_refusal_before_any_tunnel(
    harness: Harness,
    obs: Observed,
    authority: str,
    status: int,
    reason: str,
    body_host: str | None,
):
    response = harness.connect(fill(authority, harness))

    assert_refused(response, reason, status, host=body_host)
    obs.assert_nothing_reached()


def test_no_tunnel_after_a_refused_connect(harness: Harness, obs: Observed):
    # A TLS handshake on the connection of a refused CONNECT must not complete: the proxy
    # may answer with an HTTP error, close, or wait (a short timeout counts as refused).
    with harness.conn() as conn:
        assert_refused(harness.remember(conn.connect("notlisted.test:443")), "not_allowlisted")
        conn.sock.settimeout(2)
        with pytest.raises(OSError):  # ssl.SSLError, EOF, reset and timeout are all OSErrors
            conn.start_tls(harness.client_tls(), "notlisted.test")
            conn.request("GET", "/after-refusal", [("Host", "notlisted.test")])
    obs.assert_nothing_reached()


@pytest.mark.parametrize(("authority", "host", "reason"), TUNNEL_REFUSALS)
def test_request_inside_tunnel_refused(
    harness: Harness, obs: Observed, authority: str, host: str, reason: str
):
    response = harness.https(authority, "/inside", [("Authorization", "Bearer sandbox")], host=host)

    assert_refused(response, reason)
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("authority", "sni", "host"),
    [
        ("api.allowed.test:443", "other.allowed.test", "other.allowed.test"),
        ("api.allowed.test:443", "other.allowed.test", "api.allowed.test"),
        ("other.allowed.test:443", "api.allowed.test", "api.allowed.test"),
    ],
)
def test_sni_that_disagrees_with_the_connect_target_is_refused(
    harness: Harness, obs: Observed, authority: str, sni: str, host: str
):
    # Refusing the handshake or answering 403 host_mismatch are both correct.
    try:
        with harness.tunnel(authority, sni=sni) as conn:
            response = harness.remember(conn.request("GET", "/sni", [("Host", host)]))
    except (ssl.SSLError, ConnectionError) as exc:
        print(f"refused at the TLS layer: {exc!r}")
    else:
        assert_refused(response, "host_mismatch")
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    "request_line",
    [
        "CONNECT user@api.allowed.test:443",
        "CONNECT api.allowed.test:70000",
        "CONNECT api..allowed.test:443",
        "GET http://user:pw@other.allowed.test/userinfo",
        "GET http://user@other.allowed.test/userinfo",
    ],
)
def test_malformed_request_line_never_reaches_upstream(
    harness: Harness, obs: Observed, request_line: str
):
    # mitmproxy may reject these itself (400) before the policy sees them; either way
    # the answer is the documented bad_request.
    with harness.conn() as conn:
        conn.send(f"{request_line} HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n".encode())
        response = harness.remember(conn.read_response(request_line.split()[0]))

    assert 400 <= response.status < 500, response.describe()
    # mitmproxy's own 400 is the product's JSON too (D354), with its status.
    assert_refused(response, "bad_request", status=response.status)
    obs.assert_nothing_reached()


def test_refused_tunnel_is_never_opened_for_a_refused_then_allowed_connect(
    harness: Harness, obs: Observed
):
    # The refusal is per CONNECT: a fresh CONNECT for an allowed host still works.
    with pytest.raises(TunnelRefused) as refused, harness.tunnel("notlisted.test:443"):
        pass
    assert_refused(refused.value.response, "not_allowlisted", host="notlisted.test")
    obs.assert_nothing_reached()
    assert harness.https("other.allowed.test:443", "/after").status == 200
