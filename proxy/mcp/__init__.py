"""MCP servers judged per message (docs/configuration.md#mcp-servers).

Pure, like `proxy.stages`: no mitmproxy here; the adapter is addons/mcp.py.

* `policy` — an entry's `mcp:` block parsed and checked (`parse_mcp`, `McpPolicy`);
* `message` — the strict reading of a POST body (one JSON-RPC message or a batch);
* `judge` — each message against the policy, the mirrored headers, the refusal body;
* `tools_list` — `filter_tools_list` over a JSON answer;
* `sse` — server-sent events as a stream transform, one event at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_egress.proxy.mcp.judge import McpVerdict
from sandbox_egress.proxy.mcp.policy import McpPolicy as McpPolicy  # re-exported
from sandbox_egress.proxy.mcp.tools_list import ToolsFilter
from sandbox_egress.proxy.paths import canonical_path, split_target

if TYPE_CHECKING:
    from sandbox_egress.proxy.decision import Decision


def endpoint_policies(decision: Decision, method: str, target: str) -> tuple[McpPolicy, ...]:
    """The `mcp:` policies judging a request: the deciding entry's and, for a sandbox, its
    node's (a ceiling, like rules), each when the request is a POST to one of its endpoints
    (the canonical path). A GET (the server's event stream) or a DELETE (the session's end)
    carries no message and follows the entry's rules alone (D213)."""
    if not decision.allowed or method != "POST":
        return ()
    node = decision.node.entry if decision.node is not None else None
    path = canonical_path(split_target(target)[0])
    found = []
    for entry in (decision.entry, node):
        policy = entry.mcp if entry is not None else None
        if policy is not None and path in policy.endpoints and policy not in found:
            found.append(policy)
    return tuple(found)


@dataclass(slots=True)
class McpState:
    """One MCP POST through the proxy (kept on the flow by addons/mcp.py): the policies
    judging it while its body is held, the verdict once judged (its names for the audit
    line), and the filter its answer goes through, if any."""

    policies: tuple[McpPolicy, ...]
    verdict: McpVerdict | None = None
    tools: ToolsFilter | None = None

    def audit_names(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | None:
        verdict = self.verdict
        return None if verdict is None else (verdict.methods, verdict.tools, verdict.arguments)
