"""End to end, real MCP servers that serve more than one spelling of their endpoint, behind
the real proxy (issue 43's "done means"): Express with the TypeScript SDK (case and a
trailing slash ignored) and the Python SDK mounted in Starlette (everything below
`/mcp`), both from testbed/mcp_servers.py, in the upstream namespace over TLS.

For each server, an allowed call by another spelling reaches it (so the spelling is one
the server serves) and a refused call by any spelling never does: the server's own call
log is the witness. A `tools/list` answer the mounted server replays on the GET stream
(`Last-Event-ID`) arrives filtered, like the POST's own answer.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.harness import JsonLines
from testbed.mcp_servers import EXPRESS_SCRIPT, express_modules
from testbed.netns import UPSTREAM_IP, Topology
from testbed.rawhttp import request_bytes
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, _start_and_wait

pytestmark = pytest.mark.netns

EXPRESS, STARLETTE, RESUMABLE = 9448, 9449, 9451
CONFIG = f"""\
network:
  allowlist:
    - domain: other.allowed.test
      ports: [{EXPRESS}, {STARLETTE}, {RESUMABLE}]
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        filter_tools_list: true
    - domain: 198.18.1.0/24               # the upstreams' range (internal: opened explicitly)
"""
CALL = '{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{}","arguments":{{}}}}}}'
HEADERS = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]
# Served by the server named (the allowed control proves it), refused by the proxy.
SERVED = {EXPRESS: ["/mcp", "/MCP", "/mcp/", "/Mcp/"], STARLETTE: ["/mcp/", "/mcp/x", "/mcp/a/b"]}
OTHER_SPELLINGS = ["/%6Dcp", "/mcp;x", "//mcp", "/x/../mcp", "/MCP/x", "/rpc"]


@pytest.fixture(scope="module")
def calls(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log = e2e_dir / "mcp-servers-calls.jsonl"
    log.touch()
    cert, key = str(pki.server_cert), str(pki.server_key)
    node = topology.exec_prefix(topology.ns_upstream) + [
        "env", f"NODE_PATH={express_modules()}", "node", str(EXPRESS_SCRIPT),
        UPSTREAM_IP, str(EXPRESS), cert, key, str(log), str(e2e_dir / "express.ready"),
    ]  # fmt: skip
    mounted = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.mcp_servers", "--listen", f"{UPSTREAM_IP}:{STARLETTE}",
        "--resumable", f"{UPSTREAM_IP}:{RESUMABLE}", "--cert", cert, "--key", key, "--log", str(log),
        "--ready", str(e2e_dir / "starlette.ready"),
    ]  # fmt: skip
    children = [
        _start_and_wait("mcp-express", node, e2e_dir, e2e_dir / "express.ready"),
        _start_and_wait("mcp-starlette", mounted, e2e_dir, e2e_dir / "starlette.ready"),
    ]
    try:
        yield JsonLines(log)
    finally:
        for child in children:
            child.stop()


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return private_proxy("mcp-servers", CONFIG)


def call(proxy: PrivateProxy, port: int, path: str, tool: str) -> tuple[int, list[str]]:
    with proxy.view.tunnel(f"other.allowed.test:{port}") as conn:
        host = [("Host", f"other.allowed.test:{port}")]
        response = conn.request("POST", path, host + HEADERS, CALL.format(tool).encode())
    return response.status, response.header_all("X-Egress-Denied")


@pytest.mark.parametrize("port", [EXPRESS, STARLETTE], ids=["express", "starlette"])
def test_no_refused_call_reaches_either_server_by_any_spelling(
    proxy: PrivateProxy, calls: JsonLines, port: int
) -> None:
    server = "express" if port == EXPRESS else "starlette"
    for path in SERVED[port]:
        mark = calls.mark()
        assert call(proxy, port, path, "search_repositories") == (200, []), path
        assert calls.since(mark) == [{"tool": "search_repositories", "server": server}], path
    mark = calls.mark()
    for path in SERVED[port] + OTHER_SPELLINGS:
        assert call(proxy, port, path, "delete_repo") == (403, ["mcp_tool_denied"]), path
    assert calls.since(mark) == []


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "e2e", "version": "1"},
    },
}


def listed(sse: bytes) -> list[list[str]]:
    """The tool names of each tools list in the events of `sse`."""
    found = []
    for line in sse.decode(errors="replace").splitlines():
        message = json.loads(line[6:]) if line.startswith("data: {") else {}
        tools = message.get("result", {}).get("tools")
        if isinstance(tools, list):
            found.append([t["name"] for t in tools])
    return found


def test_a_tools_list_replayed_on_the_get_stream_is_filtered(
    proxy: PrivateProxy, calls: JsonLines
) -> None:
    authority = f"other.allowed.test:{RESUMABLE}"
    with proxy.view.tunnel(authority) as conn:
        host = [("Host", authority)]
        answer = conn.request("POST", "/mcp/", host + HEADERS, json.dumps(INITIALIZE).encode())
        assert answer.status == 200, answer.describe()
        session = [("Mcp-Session-Id", answer.header("mcp-session-id") or "")]
        note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        assert conn.request("POST", "/mcp/", host + HEADERS + session, note).status == 202
        tools = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
        answer = conn.request("POST", "/mcp/", host + HEADERS + session, tools)
        assert listed(answer.body) == [["search_repositories"]]  # the POST's answer
        head = request_bytes(
            "GET",
            "/mcp/",
            host + session + [("Accept", "text/event-stream"), ("Last-Event-ID", "0")],
        )
        conn.send(head)
        replayed = read_until(conn, lambda sse: bool(listed(sse)), 20.0)
    assert listed(replayed) == [["search_repositories"]], replayed[-800:]


def read_until(conn: Any, done: Callable[[bytes], bool], timeout: float) -> bytes:
    """What the connection sends until `done` holds for it, or the timeout."""
    received, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline and len(received) < 1 << 20:
        if done(received):
            break
        conn.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = conn.sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return received
