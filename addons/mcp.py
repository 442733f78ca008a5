"""The MCP stage's adapter (docs/configuration.md#mcp-servers): a POST to an MCP endpoint
is held until its messages are judged, and a tools/list answer is filtered as it streams.

`hold` (from the request stage) buffers the body instead of streaming it: only a body of
announced size up to the entry's `max_body` (at most mitmproxy's buffering bound, so it
never switches to streaming behind the gate) and without `Content-Encoding`; anything
else is `mcp_bad_request` there (D212). `judge` (the `request` hook, the whole body read)
asks the pure `proxy.mcp.judge` once per policy (a sandbox's and its node's) and either
lets the POST go or answers the JSON-RPC error the MCP SDK raises; nothing reaches the
server. `answer_stream` (the response stage) wraps the response's stream function with
the tools/list filter: JSON held to its end (bounded), server-sent events forwarded one
by one (`proxy.mcp.sse`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.limits import STREAM_BODIES_OVER
from sandbox_egress.proxy.mcp import McpPolicy, McpState
from sandbox_egress.proxy.mcp.judge import judge_post, refusal_body
from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import (
    Unreadable,
    json_transform,
    tools_filter,
    unreadable_answer,
)
from sandbox_egress.proxy.metrics import ProxyMetrics

Stream = Callable[[bytes], Iterable[bytes] | bytes]
# mitmproxy's own buffering bound: a held body never switches to streaming behind the judge.
HELD_BODY_LIMIT = 1024 * 1024
if STREAM_BODIES_OVER != "1m":  # the bound above is mitmproxy's, written as bytes
    raise ImportError("addons.mcp: HELD_BODY_LIMIT must follow STREAM_BODIES_OVER")
MIRRORED = ("mcp-method", "mcp-name")


def hold(
    request: http.Request, state: FlowState, policies: tuple[McpPolicy, ...]
) -> Decision | None:
    """Buffer the POST's body for `judge`, or the refusal when it cannot be buffered."""
    refused = Decision.deny(Reason.MCP_BAD_REQUEST, state.decision.entry, state.decision.clause)
    limit = min(HELD_BODY_LIMIT, *(p.max_body for p in policies))
    if "content-encoding" in request.headers or "content-length" not in request.headers:
        return refused  # a compressed or unannounced body is never read here
    try:
        size = expected_http_body_size(request)
    except ValueError:
        return refused
    if size is None or size > limit:
        return refused
    request.stream = False
    state.mcp = McpState(policies)
    return None


def judge(
    flow: http.HTTPFlow, state: FlowState, decision: Decision, metrics: ProxyMetrics
) -> Decision:
    """The held POST: allowed as `decision` says, or refused with a JSON-RPC error."""
    held = state.mcp
    if held is None:
        raise ValueError("judge without a held MCP body")
    request = flow.request
    body = request.raw_content or b""
    content_type = request.headers.get_all("content-type")
    mirrored = {name: request.headers.get_all(name) for name in MIRRORED}
    verdict = None
    for policy in held.policies:
        verdict = judge_post(policy, content_type, mirrored, body)
        if not verdict.allowed:
            break
    if verdict is None:
        raise ValueError("no policy judged the MCP body")
    held.verdict = verdict
    count(metrics, held, verdict.reason)
    if verdict.reason is None and verdict.body is not None:
        state.bytes_sent = len(body)
        held.tools = tools_filter(held.policies, verdict.body)
        if held.tools is not None:
            request.headers["accept-encoding"] = "identity"  # an answer the filter can read
        return decision
    reason = verdict.reason or Reason.MCP_BAD_REQUEST
    flow.response = http.Response.make(
        Decision.deny(reason).status,
        refusal_body(reason, verdict.detail, verdict.body),
        {"Content-Type": "application/json", "X-Egress-Denied": reason.value},
    )
    return Decision.deny(reason, decision.entry, decision.clause)


def count(metrics: ProxyMetrics, held: McpState, reason: Reason | None) -> None:
    """One count per message, by method: a configured method, `response`, or `other`."""
    verdict = held.verdict
    known = frozenset().union(*(p.methods for p in held.policies))
    methods = [m.method for m in verdict.body.messages] if verdict and verdict.body else [None]
    for method in methods:
        label = "response" if method is None else method if method in known else "other"
        metrics.count_mcp(label, reason)


def answer_stream(flow: http.HTTPFlow, state: FlowState, inner: Stream) -> Stream:
    """The response's stream function with the tools/list filter after `inner` (counting,
    redaction); unchanged when the answer needs no filter."""
    held, response = state.mcp, flow.response
    tools = held.tools if held is not None else None
    if tools is None or response is None:
        return inner
    sse = response.headers.get("content-type", "").split(";")[0].strip().lower()
    sse_stream = sse == "text/event-stream"
    limit = min(p.max_body for p in tools.policies)
    transform = (
        EventStream(tools.rewrite, limit).feed if sse_stream else json_transform(tools, limit)
    )
    if "content-encoding" in response.headers:  # compressed although asked for identity
        transform = _refuse
    response.headers.pop("content-length", None)  # the body is rewritten
    if not (response.is_http2 or response.is_http3):
        response.headers["transfer-encoding"] = "chunked"
    ended = False  # once the error is sent, nothing more is forwarded

    def stream(chunk: bytes) -> list[bytes]:
        nonlocal ended
        data = inner(chunk)
        data = data if isinstance(data, bytes) else b"".join(data)
        if ended:
            return []
        try:
            out = transform(data) if data else b""
            if not chunk:
                out += transform(b"")
        except Unreadable:
            ended = True
            return [unreadable_answer(tools, sse_stream)]
        return [out] if out else []

    return stream


def _refuse(data: bytes) -> bytes:
    raise Unreadable("a compressed answer")
