"""End to end, real MCP servers that serve more than one spelling of their endpoint, behind
the real proxy (issue 43's "done means"): Express with the TypeScript SDK (case and a
trailing slash ignored) and the Python SDK mounted in Starlette (everything below
`/mcp`), both from testbed/mcp_servers.py, in the upstream namespace over TLS.

For each server, an allowed call by another spelling reaches it (so the spelling is one
the server serves) and a refused call by any spelling never does: the server's own call
log is the witness.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.harness import JsonLines
from testbed.mcp_servers import EXPRESS_SCRIPT, express_modules
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, _start_and_wait

pytestmark = pytest.mark.netns

EXPRESS, STARLETTE = 9448, 9449
CONFIG = f"""\
network:
  allowlist:
    - domain: other.allowed.test
      ports: [{EXPRESS}, {STARLETTE}]
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
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
        "--cert", cert, "--key", key, "--log", str(log),
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
