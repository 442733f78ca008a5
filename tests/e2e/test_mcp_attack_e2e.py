"""End to end, an independent attack on the MCP gate (issue 43's surface): answers a
misbehaving MCP server labels so that the gate's `filter_tools_list` would not read them
as an event stream, while an MCP client does (the TypeScript SDK reads a GET stream
whatever its Content-Type; the Python SDK takes a POST answer whose Content-Type begins
with `text/event-stream`, also when the field is sent twice).

The upstream is testbed/hostile_server.py (`/mcp-stream?type=N`): one server-sent event
carrying a `tools/list` result with an allowed and a refused tool, under the Content-Type
fields of `MCP_STREAM_TYPES[N]` and in its charset (httpx decodes an event stream by it). Whatever the label, the refused tool never reaches the
sandbox (D420).

A request target with a fragment (`/mcp#x`, which Node's and httptools' parsers route to
`/mcp`) would be another path to the gate; it never gets that far (the request head check
refuses it), so a body the gate could neither hold nor read as JSON cannot use it.
"""

from __future__ import annotations

import contextlib
import ssl

import pytest

from testbed.expect import Observed
from testbed.hostile_server import MCP_STREAM_TYPES
from testbed.rawhttp import Conn, Response
from tests.e2e.conftest import PrivateProxy
from tests.e2e.memory_support import (  # noqa: F401 - fixtures
    HOSTILE_PORT,
    Hostile,
    hostile_fixture,
    plain,
)

pytestmark = pytest.mark.netns

HOST = f"other.allowed.test:{HOSTILE_PORT}"
CONFIG = f"""\
network:
  allowlist:
    - domain: other.allowed.test
      ports: [{HOSTILE_PORT}]
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        filter_tools_list: true
    - domain: x.wild.test                 # the echo upstream: it shows what reached it
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
    - domain: 198.18.1.0/24
"""
TOOLS_LIST = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'


@pytest.fixture(name="proxy")
def proxy_fixture(private_proxy) -> PrivateProxy:  # type: ignore[no-untyped-def]
    return private_proxy("mcp-attack", CONFIG)


def exchange(p: PrivateProxy, head: bytes, method: str) -> Response:
    """The answer to one request on a connection of its own."""
    with Conn.over(plain(p)) as conn:
        conn.send(head)
        return conn.read_response(method)


def request(method: str, path: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} http://{HOST}{path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n"
        "Accept: application/json, text/event-stream\r\n"
    )
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


@pytest.mark.parametrize("variant", range(len(MCP_STREAM_TYPES)))
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_tool_never_reaches_the_sandbox_whatever_the_stream_is_labelled(
    proxy: PrivateProxy, hostile: Hostile, method: str, variant: int
) -> None:
    mark = hostile.log.mark()
    body = TOOLS_LIST if method == "POST" else b""
    answer = exchange(proxy, request(method, f"/mcp?type={variant}", body), method)
    served = hostile.log.wait_for(mark, lambda e: e.get("path") == "/mcp", timeout=15)
    assert served["ended_by"] == "size"  # the server did send its unfiltered list
    assert answer.status == 200, answer.describe()
    encoding = MCP_STREAM_TYPES[variant][1]
    assert "delete_repo" not in answer.body.decode(encoding, errors="replace"), answer.describe()
    assert b"delete_repo" not in answer.body, answer.describe()


REFUSED_CALL = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_repo","arguments":{}}}'
)


@pytest.mark.parametrize("target", ["/mcp#x", "/mcp#", "/mcp/#/../x"])
def test_a_fragment_does_not_move_a_post_off_the_endpoint(
    proxy: PrivateProxy, obs: Observed, target: str
) -> None:
    """A chunked text/plain body to `/mcp#x` is refused unread, never relayed."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(REFUSED_CALL), REFUSED_CALL)
    mark = proxy.view.audit_log.mark()
    with proxy.view.tunnel("x.wild.test:443") as conn:
        head = (
            f"POST {target} HTTP/1.1\r\nHost: x.wild.test\r\nContent-Type: text/plain\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        conn.send(head.encode() + chunked)
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            conn.read_response("POST")
    obs.assert_nothing_reached()
    audit = proxy.view.audit_log.wait_for(mark, lambda a: a.get("method") == "POST")
    assert (audit["decision"], audit["reason"]) == ("deny", "bad_request")
