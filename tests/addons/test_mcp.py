"""The MCP stage's adapter (addons/clauses/mcp.py) on mitmproxy test flows: what it holds, what it
refuses before reading, the JSON-RPC refusal, the counts, and the tools/list answer
rewritten as it streams (JSON and server-sent events)."""

from __future__ import annotations

import json

import pytest
from mitmproxy import http
from mitmproxy.test import tflow

from sandbox_egress.addons.clauses import mcp
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics

CONFIG = parse(
    {"network": {"allowlist": [{"domain": "mcp.example", "mcp": {
        "endpoint": ["/mcp"], "tools": ["search"], "filter_tools_list": True,
        "max_body": "1KiB"}}]}},
    "env.yaml",
    {},
)  # fmt: skip
ENTRY = CONFIG.allowlist[0]
assert ENTRY.mcp is not None
POLICIES = (ENTRY.mcp,)
ALLOWED = Decision.allow(ENTRY)
LIST = b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}'
TOOLS = {"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": "search"}, {"name": "drop"}]}}


def post(body: bytes, **headers: str) -> tuple[http.HTTPFlow, FlowState]:
    flow = tflow.tflow()
    flow.request.method = "POST"
    flow.request.path = "/mcp"
    flow.request.headers.clear()
    flow.request.headers["Content-Type"] = "application/json"
    flow.request.headers["Content-Length"] = str(len(body))
    for name, value in headers.items():
        flow.request.headers[name.replace("_", "-")] = value
    flow.request.raw_content = body
    return flow, FlowState(ALLOWED, "mcp.example")


@pytest.mark.parametrize(
    "headers",
    [{"Content_Encoding": "gzip"}, {"Content_Length": "2048"}, {"Content_Length": "x"}],
    ids=["compressed", "over-max-body", "bad-length"],
)
def test_what_cannot_be_held_is_refused_before_reading(headers: dict[str, str]) -> None:
    flow, state = post(LIST, **headers)
    refused = mcp.start(flow, state, POLICIES)[0]
    assert refused is not None and refused.reason is Reason.MCP_BAD_REQUEST


def test_an_unannounced_body_is_refused() -> None:
    flow, state = post(LIST)
    del flow.request.headers["Content-Length"]
    refused = mcp.start(flow, state, POLICIES)[0]
    assert refused is not None and refused.reason is Reason.MCP_BAD_REQUEST


def test_an_allowed_post_is_held_then_sent_asking_for_identity() -> None:
    flow, state = post(LIST, Accept_Encoding="gzip")
    metrics = ProxyMetrics()
    assert mcp.start(flow, state, POLICIES)[0] is None
    assert flow.request.stream is False and state.mcp is not None
    assert mcp.judge(flow, state, ALLOWED, metrics) is ALLOWED
    assert flow.response is None and state.bytes_sent == len(LIST)
    assert flow.request.headers["accept-encoding"] == "identity"
    assert state.mcp.audit_names() == (("tools/list",), (), ())
    sample = metrics.mcp_messages.labels("tools/list", "allowlisted")._value.get()
    assert sample == 1


def test_a_refused_call_is_answered_with_a_jsonrpc_error() -> None:
    body = b'{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"drop"}}'
    flow, state = post(body)
    metrics = ProxyMetrics()
    assert mcp.start(flow, state, POLICIES)[0] is None
    decision = mcp.judge(flow, state, ALLOWED, metrics)
    assert (decision.allowed, decision.reason) == (False, Reason.MCP_TOOL_DENIED)
    assert flow.response is not None and flow.response.status_code == 403
    assert flow.response.headers["X-Egress-Denied"] == "mcp_tool_denied"
    answer = json.loads(flow.response.content or b"")
    assert (answer["id"], answer["error"]["code"]) == ("c", -31403)


def answered(content_type: str, encoding: str | None = None) -> tuple[http.HTTPFlow, FlowState]:
    flow, state = post(LIST)
    assert mcp.start(flow, state, POLICIES)[0] is None
    mcp.judge(flow, state, ALLOWED, ProxyMetrics())
    flow.response = tflow.tresp()
    flow.response.headers["Content-Type"] = content_type
    flow.response.headers["Content-Length"] = "100"
    if encoding:
        flow.response.headers["Content-Encoding"] = encoding
    return flow, state


def run(stream: object, chunks: list[bytes]) -> list[bytes]:
    assert callable(stream)
    return [b"".join(stream(chunk)) for chunk in [*chunks, b""]]


def test_a_json_tools_list_answer_is_filtered_at_its_end() -> None:
    flow, state = answered("application/json")
    stream = mcp.answer_stream(flow, state, lambda chunk: chunk)
    whole = json.dumps(TOOLS).encode()
    out = run(stream, [whole[:9], whole[9:]])
    assert out[:2] == [b"", b""]
    assert [t["name"] for t in json.loads(out[2])["result"]["tools"]] == ["search"]
    assert flow.response is not None and "content-length" not in flow.response.headers
    assert flow.response.headers["transfer-encoding"] == "chunked"


def test_an_sse_tools_list_answer_is_filtered_event_by_event() -> None:
    flow, state = answered("text/event-stream")
    stream = mcp.answer_stream(flow, state, lambda chunk: chunk)
    ping = b'data: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    out = run(stream, [ping, b"data: " + json.dumps(TOOLS).encode() + b"\n\n"])
    assert out[0] == ping
    assert b'"drop"' not in out[1] and b'"search"' in out[1]


def test_a_compressed_answer_is_replaced_by_an_error() -> None:
    flow, state = answered("application/json", "gzip")
    stream = mcp.answer_stream(flow, state, lambda chunk: chunk)
    out = run(stream, [b"\x1f\x8b compressed", b"more"])
    assert json.loads(out[0])["error"]["data"]["reason"] == "mcp_bad_request"
    assert out[1:] == [b"", b""]


def test_an_answer_without_a_filter_is_left_alone() -> None:
    flow, state = post(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    assert mcp.start(flow, state, POLICIES)[0] is None
    mcp.judge(flow, state, ALLOWED, ProxyMetrics())

    def inner(chunk: bytes) -> bytes:
        return chunk

    assert mcp.answer_stream(flow, state, inner) is inner
