"""End to end, the MCP gate by every spelling and transport (issue 43).

A refused `tools/call` sent through the real proxy to the echo upstream (whose log shows
every connection and request that reached it) by another spelling of the endpoint, on
another path of the entry, inside a WebSocket upgrade, or after an empty line in a
plain tunnel to an address entry with `mcp:` (which mitmproxy took for raw TCP) never
reaches the upstream; a body that is not JSON-RPC on another path still does.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings

from testbed.expect import Observed
from testbed.netns import UPSTREAM_IP
from tests.e2e.conftest import PrivateProxy
from tests.proxy.test_mcp_route import endpoint_spellings

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

CONFIG = """\
network:
  allowlist:
    - domain: x.wild.test                 # the echo upstream, through intercepted TLS
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
    - domain: 198.18.1.0/24               # the upstreams' range, an address entry
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
"""
DROP = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_repo","arguments":{}}}'
)
SEARCH = DROP.replace(b"delete_repo", b"search_repositories")
JSON = [("Content-Type", "application/json")]
SPELLINGS = ["/mcp/", "/MCP", "/Mcp/", "/mcp/x", "/%6Dcp", "/%6dcp/", "/mcp;x", "//mcp",
             "/x/../mcp", "/./MCP", "/mcp/.", "/m%43p/sub", "/%256Dcp"]  # fmt: skip


@pytest.fixture(scope="module")
def shared_proxy(module_private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return module_private_proxy("mcp-spellings", CONFIG)


@pytest.fixture
def proxy(shared_proxy: PrivateProxy) -> PrivateProxy:
    """The module's proxy (issue 49, D641: the gate keeps no state between connections),
    once no connection of an earlier test is open in it."""
    shared_proxy.wait_idle()
    return shared_proxy


def post(view: PrivateProxy, path: str, body: bytes, fields: list[tuple[str, str]]) -> object:
    with view.view.tunnel("x.wild.test:443") as conn:
        return conn.request("POST", path, [("Host", "x.wild.test"), *fields], body)


@pytest.mark.parametrize("path", SPELLINGS)
def test_a_refused_call_by_any_spelling_never_reaches_the_server(
    proxy: PrivateProxy, obs: Observed, path: str
) -> None:
    response = post(proxy, path, DROP, JSON)
    assert (response.status, response.header_all("X-Egress-Denied")) == (  # type: ignore[attr-defined]
        403,
        ["mcp_tool_denied"],
    )
    assert response.json()["id"] == 7  # type: ignore[attr-defined]
    obs.assert_nothing_reached()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=endpoint_spellings())
def test_a_refused_call_by_a_generated_spelling_never_reaches_the_server(
    proxy: PrivateProxy, path: str
) -> None:
    """The property test of tests/proxy/test_mcp_route.py through the real proxy: the
    refusal is readable and nothing reaches the upstream namespace."""
    upstream, traps = proxy.view.upstream_log.mark(), proxy.view.trap_log.mark()
    response = post(proxy, path, DROP, JSON)
    assert response.status == 403, (path, response.status)  # type: ignore[attr-defined]
    assert response.header_all("X-Egress-Denied") == ["mcp_tool_denied"]  # type: ignore[attr-defined]
    assert proxy.view.upstream_log.since(upstream) == [], path
    assert proxy.view.trap_log.since(traps) == [], path


@pytest.mark.parametrize(
    ("path", "media", "status", "reason"),
    [
        ("/rpc", "application/json", 403, "mcp_tool_denied"),
        ("/api/v1/messages", "application/json", 403, "mcp_tool_denied"),
        ("/", "text/plain", 400, "mcp_bad_request"),  # read strictly: JSON only
    ],
)
def test_a_jsonrpc_body_on_another_path_is_judged(
    proxy: PrivateProxy, obs: Observed, path: str, media: str, status: int, reason: str
) -> None:
    response = post(proxy, path, DROP, [("Content-Type", media)])
    assert response.status == status  # type: ignore[attr-defined]
    assert response.header_all("X-Egress-Denied") == [reason]  # type: ignore[attr-defined]
    obs.assert_nothing_reached()


def test_other_bodies_on_other_paths_reach_the_server(proxy: PrivateProxy, obs: Observed) -> None:
    body = b'{"name":"ada","tags":["x"]}'
    assert post(proxy, "/api/items", body, JSON).status == 200  # type: ignore[attr-defined]
    request = obs.only_request()
    assert (request["target"], request["body_len"]) == ("/api/items", len(body))


def test_an_allowed_call_by_another_spelling_goes_through(
    proxy: PrivateProxy, obs: Observed
) -> None:
    assert post(proxy, "/MCP/", SEARCH, JSON).status == 200  # type: ignore[attr-defined]
    assert obs.only_request()["target"] == "/MCP/"


def test_a_websocket_upgrade_is_refused_without_websocket_true(
    proxy: PrivateProxy, obs: Observed
) -> None:
    upgrade = [
        ("Host", "x.wild.test"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ]
    for path in ("/mcp", "/elsewhere"):
        with proxy.view.tunnel("x.wild.test:443") as conn:
            response = conn.request("GET", path, upgrade, b"")
        assert (response.status, response.header_all("X-Egress-Denied")) == (
            400,
            ["mcp_bad_request"],
        )
    obs.assert_nothing_reached()


def _after_an_empty_line(proxy: PrivateProxy, body: bytes) -> bytes:
    """CONNECT to the address entry (plain HTTP inside), then a request preceded by an
    empty line; what came back before the proxy or the upstream closed."""
    with proxy.view.conn() as conn:
        assert conn.connect(f"{UPSTREAM_IP}:80").status == 200
        head = (
            f"\r\nPOST /mcp HTTP/1.1\r\nHost: {UPSTREAM_IP}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        conn.send(head.encode() + body)
        conn.sock.settimeout(10)
        received = b""
        try:
            while len(received) < 65536:
                chunk = conn.sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except (TimeoutError, ConnectionError, ssl.SSLError):
            pass
        return received


def test_a_request_after_an_empty_line_is_parsed_as_http_and_judged(
    proxy: PrivateProxy, obs: Observed
) -> None:
    """mitmproxy takes bytes that begin with CRLF for raw TCP; nginx and Node read an
    HTTP request (RFC 9112 2.2). The proxy reads it as HTTP too: judged, refused."""
    answer = _after_an_empty_line(proxy, DROP)
    assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    assert b"X-Egress-Denied: mcp_tool_denied" in answer
    obs.assert_nothing_reached()


def test_an_allowed_request_after_an_empty_line_arrives_as_http(
    proxy: PrivateProxy, obs: Observed
) -> None:
    answer = _after_an_empty_line(proxy, SEARCH)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    request = obs.only_request()
    assert (request["method"], request["target"], request["body_len"]) == (
        "POST",
        "/mcp",
        len(SEARCH),
    )


def test_an_empty_line_inside_tls_without_alpn_is_parsed_as_http(
    proxy: PrivateProxy, obs: Observed
) -> None:
    """Inside intercepted TLS without ALPN mitmproxy chooses the layer on the bytes, as in
    a plain tunnel: the request after the empty line is read as HTTP and judged."""
    with proxy.view.tunnel("x.wild.test:443") as conn:
        head = (
            "\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: x.wild.test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(DROP)}\r\n\r\n"
        )
        conn.send(head.encode() + DROP)
        response = conn.read_response("POST")
    assert (response.status, response.header_all("X-Egress-Denied")) == (403, ["mcp_tool_denied"])
    obs.assert_nothing_reached()
