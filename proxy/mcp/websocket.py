"""One WebSocket message on an MCP entry with `mcp.websocket: true` (D332).

Each message is one JSON-RPC document, read as strictly as a POST body
(`proxy.mcp.message.read_body`, as if sent `application/json`):

* from the sandbox: judged by every policy like a POST (`judge_post`); a refused
  message is never forwarded — the adapter drops it and answers the sandbox with the
  JSON-RPC error a refused POST gets;
* from the server: a message that cannot be read ends the connection (a tools list
  is never forwarded unfiltered, D215); a readable one is forwarded, its tools lists
  filtered when a policy filters them (D334). The server's own requests (sampling,
  roots) are not judged by `mcp.methods`, as on an event stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_egress.proxy.mcp.judge import McpVerdict, judge_post
from sandbox_egress.proxy.mcp.message import read_body
from sandbox_egress.proxy.mcp.policy import McpPolicy
from sandbox_egress.proxy.mcp.tools_list import ToolsFilter, Unreadable

AS_JSON = ["application/json"]  # a WebSocket message has no Content-Type: read as JSON


def judge_sent(policies: tuple[McpPolicy, ...], content: bytes) -> McpVerdict:
    """The verdict on a message the sandbox sends: the first refusal, or the admission."""
    verdict = McpVerdict(None)
    for policy in policies:
        verdict = judge_post(policy, AS_JSON, {}, content)
        if not verdict.allowed:
            return verdict
    return verdict


@dataclass(frozen=True, slots=True)
class Received:
    content: bytes | None  # what to forward (rewritten or as received); None: end it
    detail: str = ""  # why it was ended


def filter_received(
    policies: tuple[McpPolicy, ...], tools: ToolsFilter | None, content: bytes
) -> Received:
    """What of a server's message reaches the sandbox."""
    body = read_body(AS_JSON, content, min(p.max_body for p in policies))
    if isinstance(body, str):
        return Received(None, body)
    if tools is None:
        return Received(content)
    try:
        rewritten = tools.rewrite(content.decode("utf-8"))
    except Unreadable as exc:
        return Received(None, str(exc))
    return Received(content if rewritten is None else rewritten.encode())
