"""MCP servers judged per message (docs/configuration.md#mcp-servers).

Pure, like `proxy.stages`: no mitmproxy here; the adapter is addons/clauses/mcp.py.

* `policy` — an entry's `mcp:` block parsed and checked (`parse_mcp`, `McpPolicy`);
* `message` — the strict reading of a POST body (one JSON-RPC message or a batch);
* `judge` — each message against the policy, the mirrored headers, the refusal body;
* `tools_list` — `filter_tools_list` over a JSON answer;
* `sse` — server-sent events as a stream transform, one event at a time;
* `route` — which requests of an MCP entry are judged and how (endpoint spellings,
  JSON-RPC bodies on other paths, WebSocket upgrades);
* `websocket` — one WebSocket message judged or filtered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_egress.proxy.mcp.judge import McpVerdict
from sandbox_egress.proxy.mcp.policy import McpPolicy as McpPolicy  # re-exported
from sandbox_egress.proxy.mcp.route import Route
from sandbox_egress.proxy.mcp.tools_list import ToolsFilter

if TYPE_CHECKING:
    from sandbox_egress.proxy.decision import Decision


def entry_policies(decision: Decision) -> tuple[McpPolicy, ...]:
    """The `mcp:` policies judging an allowed request: the deciding entry's and, for a
    sandbox, its node's (a ceiling, like rules). Which of the request's parts they judge
    is `route.mcp_route`'s answer (D330-D334)."""
    if not decision.allowed:
        return ()
    node = decision.node.entry if decision.node is not None else None
    found: list[McpPolicy] = []
    for entry in (decision.entry, node):
        policy = entry.mcp if entry is not None else None
        if policy is not None and policy not in found:
            found.append(policy)
    return tuple(found)


@dataclass(slots=True)
class McpState:
    """One request on an MCP entry (kept on the flow by addons/clauses/mcp.py): the policies
    judging it, how (`route`), the verdict once its held body is judged (its names for
    the audit line), and the filters its answer goes through, if any."""

    policies: tuple[McpPolicy, ...]
    route: Route = Route.POST
    held: bool = True  # its body is held until `addons.mcp.judge` reads it
    verdict: McpVerdict | None = None
    tools: ToolsFilter | None = None  # a JSON answer: the POST's tools/list ids
    streams: ToolsFilter | None = None  # an event stream: every tools/list answer (D334)

    def audit_names(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
        verdict = self.verdict
        return None if verdict is None else (verdict.methods, verdict.tools, verdict.arguments)
