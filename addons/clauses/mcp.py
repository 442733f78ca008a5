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

from mitmproxy import http

from sandbox_egress.addons import mitm
from sandbox_egress.addons.clauses.base import HELD_BODY_LIMIT, Adapter, Stream, Turn, holdable
from sandbox_egress.addons.layers.limits import body_follows
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.mcp import McpPolicy, McpState
from sandbox_egress.proxy.mcp.judge import judge_post, refusal_body
from sandbox_egress.proxy.mcp.route import Route, maybe_jsonrpc, mcp_route
from sandbox_egress.proxy.mcp.sse import EventStream
from sandbox_egress.proxy.mcp.tools_list import (
    AMBIGUOUS_LABEL,
    JSON_LABEL,
    Unreadable,
    answer_label,
    json_transform,
    streams_filter,
    tools_filter,
    unreadable_answer,
)
from sandbox_egress.proxy.mcp.websocket import filter_received, judge_sent
from sandbox_egress.proxy.metrics import ProxyMetrics

MIRRORED = ("mcp-method", "mcp-name")
WEBSOCKET_KEY = "egress-mcp"  # flow.metadata: the request's McpState, for its WebSocket messages


def start(
    flow: http.HTTPFlow, state: FlowState, policies: tuple[McpPolicy, ...]
) -> tuple[Decision | None, bool]:
    """(the refusal or None, whether the body is held for `judge`) of a request on an
    MCP entry, sorted by `proxy.mcp.route.mcp_route`."""
    request = flow.request
    refused = Decision.deny(Reason.MCP_BAD_REQUEST, state.decision.entry, state.decision.clause)
    upgrade = request.headers.get("upgrade", "").lower()
    websocket = "websocket" in upgrade or "sec-websocket-key" in request.headers
    path = request.path.partition("?")[0]
    route = mcp_route(policies, path, body=body_follows(flow), websocket=websocket)
    if route is Route.REFUSED:
        return refused, False  # an upgrade without mcp.websocket: true (D332)
    held = McpState(policies, route, held=False, streams=streams_filter(policies))
    state.mcp = held
    flow.metadata[WEBSOCKET_KEY] = held  # the request's state is gone once the 101 is audited
    if held.streams is not None:
        request.headers["accept-encoding"] = "identity"  # event streams the filter can read
    if route not in (Route.POST, Route.SNIFF):
        return None, False
    if not holdable(request, min(HELD_BODY_LIMIT, *(p.max_body for p in policies))):
        if route is Route.POST or _may_be_json(request):
            return refused, False  # a body that can be neither read nor let through (D331)
        return None, False  # a body no MCP server reads as JSON-RPC: the entry's rules
    request.stream = False
    held.held = True
    return None, True


def _may_be_json(request: http.Request) -> bool:
    """A body that cannot be held on another path is refused when its media type could
    be read as JSON by a server: none, several, or one that names json (D331)."""
    types = request.headers.get_all("content-type")
    return len(types) != 1 or "json" in types[0].lower()


def judge(
    flow: http.HTTPFlow, state: FlowState, decision: Decision, metrics: ProxyMetrics
) -> Decision:
    """The held POST: allowed as `decision` says, or refused with a JSON-RPC error."""
    held = state.mcp
    if held is None or not held.held:
        raise ValueError("judge without a held MCP body")
    request = flow.request
    body = request.raw_content or b""
    if held.route is Route.SNIFF and not maybe_jsonrpc(body):
        state.bytes_sent = len(body)
        return decision  # not JSON-RPC: the entry's rules alone (D331)
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
    if held is None or response is None or not _has_body(flow):
        return inner
    label = answer_label(response.headers.get_all("content-type"))
    sse_stream = label != JSON_LABEL  # what a client may read as events is (D420)
    tools = held.tools if not sse_stream else held.streams  # a stream: by shape (D334)
    if not sse_stream and tools is None and held.route is Route.ANSWER:
        tools = held.streams  # a GET's answer: a client may read it as events whatever it says
    if tools is None:
        return inner
    limit = min(p.max_body for p in tools.policies)
    transform = (
        EventStream(tools.rewrite, limit).feed
        if sse_stream or tools.ids is None
        else json_transform(tools, limit)
    )
    if "content-encoding" in response.headers or label == AMBIGUOUS_LABEL:
        transform = _refuse  # compressed although asked for identity, or read two ways
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
    if data:
        raise Unreadable("a compressed answer, or one labelled both JSON and other")
    return b""


def _has_body(flow: http.HTTPFlow) -> bool:
    response = flow.response
    if response is None or flow.request.method == "HEAD" or response.status_code < 200:
        return False  # a 101 goes on as a WebSocket (judged per message) or is refused
    if response.status_code in (204, 304):
        return False
    return response.headers.get("content-length") != "0"


def websocket_message(flow: http.HTTPFlow, metrics: ProxyMetrics) -> None:
    """The last WebSocket message of a flow on an MCP entry, judged (`proxy.mcp.websocket`):
    a refused one from the sandbox is dropped and answered with the JSON-RPC error; one
    from the server the filter cannot read ends the connection. A WebSocket the request
    stage did not admit as one (the server upgraded what was not asked as an upgrade)
    ends at its first message."""
    held, socket = flow.metadata.get(WEBSOCKET_KEY), flow.websocket
    if not isinstance(held, McpState) or socket is None or not socket.messages:
        return
    message = socket.messages[-1]
    if held.route is not Route.WEBSOCKET:
        message.drop()  # type: ignore[no-untyped-call]
        mitm.kill(flow)
        return
    if message.from_client:
        verdict = judge_sent(held.policies, message.content)
        held.verdict = verdict
        count(metrics, held, verdict.reason)
        if verdict.allowed:
            return
        message.drop()  # type: ignore[no-untyped-call]
        reason = verdict.reason or Reason.MCP_BAD_REQUEST
        answer = refusal_body(reason, verdict.detail, verdict.body)
        mitm.inject_websocket(flow, answer)
        return
    received = filter_received(held.policies, held.streams, message.content)
    if received.content is None:
        message.drop()  # type: ignore[no-untyped-call]
        mitm.kill(flow)
    elif received.content != message.content:
        message.content = received.content


class McpAdapter(Adapter):
    """The `mcp` clause: a POST's messages held and judged, a WebSocket's judged one by
    one, a tools/list answer filtered as it streams."""

    clause = "mcp"

    def hold(self, turn: Turn) -> Decision | bool:
        policies = turn.answer.mcp
        if not policies:
            return False
        refused, holding = start(turn.flow, turn.state, policies)
        turn.held = turn.held or holding
        return holding if refused is None else refused

    def holds(self, turn: Turn) -> bool:
        held = turn.state.mcp
        return held is not None and held.held and held.verdict is None

    def judge(self, turn: Turn, decided: Decision) -> Decision:
        return judge(turn.flow, turn.state, decided, turn.shared.metrics)

    def answer(self, turn: Turn, stream: Stream) -> Stream:
        if turn.state.mcp is None:
            return stream
        return answer_stream(turn.flow, turn.state, stream)
