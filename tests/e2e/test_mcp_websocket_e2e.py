"""End to end, MCP over WebSocket with `mcp.websocket: true` (issue 43, D332): the real
proxy between the `websockets` client and the WebSocket echo upstream (testbed/ws_echo.py,
which sends every message it receives straight back).

A refused `tools/call` is never sent: the client gets the JSON-RPC error instead, and the
next message's echo is the next thing it reads. An allowed call comes back as sent. A
tools list the server sends (here, the echo of one) arrives filtered.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from testbed.harness import JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, _start_and_wait

pytestmark = pytest.mark.netns

WS_PORT = 9450
CONFIG = f"""\
network:
  allowlist:
    - domain: x.wild.test
      ports: [{WS_PORT}]
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        filter_tools_list: true
        websocket: true
    - domain: 198.18.1.0/24
"""


def call(ident: int, tool: str) -> str:
    params = {"name": tool, "arguments": {"q": "x"}}
    return json.dumps({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


@pytest.fixture(scope="module")
def ws_upgrades(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "mcp-ws.jsonl", e2e_dir / "mcp-ws.ready"
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.ws_echo", "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{WS_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("mcp-ws-echo", argv, e2e_dir, ready)
    try:
        yield JsonLines(log)
    finally:
        child.stop()


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return private_proxy("mcp-ws", CONFIG)


def receive(ws: ClientConnection) -> Any:
    return json.loads(ws.recv(timeout=20))


def test_each_message_is_judged_and_tools_lists_filtered(
    proxy: PrivateProxy, ws_upgrades: JsonLines
) -> None:
    mark = ws_upgrades.mark()
    with proxy.view.tunnel(f"x.wild.test:{WS_PORT}") as conn:
        # The tunnel is TLS already: the client speaks WebSocket over it as ws://.
        url = f"ws://x.wild.test:{WS_PORT}/mcp"
        with connect(url, sock=conn.sock, open_timeout=20) as ws:
            ws.send(call(1, "search_repositories"))
            assert receive(ws) == json.loads(call(1, "search_repositories"))
            ws.send(call(2, "delete_repo"))
            refused = receive(ws)
            assert refused["id"] == 2
            assert refused["error"]["message"].startswith("egress_denied: mcp_tool_denied: ")
            ws.send(call(3, "search_repositories"))
            assert receive(ws)["id"] == 3  # the refused call was never echoed: never sent
            tools = [{"name": "search_repositories"}, {"name": "delete_repo"}]
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 4, "result": {"tools": tools}}))
            listed = receive(ws)["result"]["tools"]
            assert [t["name"] for t in listed] == ["search_repositories"]
    assert [u["path"] for u in ws_upgrades.since(mark)] == ["/mcp"]
    metrics = proxy.view.metrics_text()
    assert 'egress_mcp_messages_total{method="tools/call",reason="mcp_tool_denied"} 1.0' in metrics
