"""The MCP adapter (addons/clauses/mcp.py) beyond the endpoint's POST (issue 43): the GET stream
and a replay after `Last-Event-ID` filtered, a WebSocket upgrade refused without
`mcp.websocket: true` and, with it, each message judged both ways; JSON-RPC bodies on
other paths held and judged, other bodies let through."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from sandbox_egress.addons import mitm
from sandbox_egress.addons.clauses import mcp
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics


def entry(**extra: Any) -> Any:
    block = {"endpoint": ["/mcp"], "tools": ["search"], "filter_tools_list": True, **extra}
    config = parse(
        {"network": {"allowlist": [{"domain": "mcp.example", "mcp": block}]}}, "env.yaml", {}
    )
    return config.allowlist[0]


ENTRY = entry()
WS_ENTRY = entry(websocket=True)
TOOLS = {"jsonrpc": "2.0", "id": 41, "result": {"tools": [{"name": "search"}, {"name": "drop"}]}}
CALL_DROP = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"drop"}}'


def request(
    method: str, path: str, body: bytes = b"", **headers: str
) -> tuple[http.HTTPFlow, FlowState]:
    flow = tflow.tflow()
    flow.request.method, flow.request.path = method, path
    flow.request.headers.clear()
    for name, value in headers.items():
        flow.request.headers[name.replace("_", "-")] = value
    if body:
        flow.request.headers["Content-Length"] = str(len(body))
    flow.request.raw_content = body
    flow.metadata["egress.body_follows"] = bool(body)
    return flow, FlowState(Decision.allow(ENTRY), "mcp.example")


def test_the_get_stream_and_its_replay_are_filtered() -> None:
    for extra in ({}, {"Last_Event_ID": "stream-1_7"}):
        flow, state = request("GET", "/mcp", Accept="text/event-stream", **extra)
        assert mcp.start(flow, state, (ENTRY.mcp,)) == (None, False)
        assert flow.request.headers["accept-encoding"] == "identity"
        flow.response = tflow.tresp()
        flow.response.headers["Content-Type"] = "text/event-stream"
        stream = mcp.answer_stream(flow, state, lambda chunk: chunk)
        event = b"id: 8\ndata: " + json.dumps(TOOLS).encode() + b"\n\n"
        out = b"".join(stream(event))  # type: ignore[arg-type]
        assert b'"search"' in out and b'"drop"' not in out


def test_a_websocket_upgrade_is_refused_unless_allowed() -> None:
    flow, state = request("GET", "/anywhere", Upgrade="websocket", Connection="Upgrade")
    refused, held = mcp.start(flow, state, (ENTRY.mcp,))
    assert refused is not None and (refused.reason, held) == (Reason.MCP_BAD_REQUEST, False)
    flow, state = request("GET", "/mcp", Upgrade="WebSocket", Connection="Upgrade")
    assert mcp.start(flow, state, (WS_ENTRY.mcp,)) == (None, False)


def test_each_websocket_message_is_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    flow = tflow.twebsocketflow()
    flow.request.headers["Upgrade"] = "websocket"
    flow.metadata["egress.body_follows"] = False
    state = FlowState(Decision.allow(WS_ENTRY), "mcp.example")
    assert mcp.start(flow, state, (WS_ENTRY.mcp,)) == (None, False)
    assert flow.websocket is not None
    metrics = ProxyMetrics()
    flow.websocket.messages.clear()
    injected: list[bytes] = []
    monkeypatch.setattr(mitm, "inject_websocket", lambda _flow, text: injected.append(text))
    flow.websocket.messages.append(_message(CALL_DROP, from_client=True))
    mcp.websocket_message(flow, metrics)
    assert flow.websocket.messages[-1].dropped
    answer = json.loads(injected[0])
    assert answer["id"] == 5 and "mcp_tool_denied" in answer["error"]["message"]
    flow.websocket.messages.append(_message(CALL_DROP.replace(b"drop", b"search"), True))
    mcp.websocket_message(flow, metrics)
    assert not flow.websocket.messages[-1].dropped and len(injected) == 1
    flow.websocket.messages.append(_message(json.dumps(TOOLS).encode(), from_client=False))
    mcp.websocket_message(flow, metrics)
    listed = json.loads(flow.websocket.messages[-1].content)["result"]["tools"]
    assert [t["name"] for t in listed] == ["search"]


def _message(content: bytes, from_client: bool) -> WebSocketMessage:
    return WebSocketMessage(Opcode.TEXT, from_client, content)


def test_a_jsonrpc_body_on_another_path_is_judged_and_others_pass() -> None:
    flow, state = request("POST", "/rpc", CALL_DROP, Content_Type="application/json")
    assert mcp.start(flow, state, (ENTRY.mcp,)) == (None, True)
    decision = mcp.judge(flow, state, Decision.allow(ENTRY), ProxyMetrics())
    assert decision.reason is Reason.MCP_TOOL_DENIED
    assert flow.response is not None and flow.response.status_code == 403
    form = b"name=ada"
    flow, state = request("PUT", "/items", form, Content_Type="application/x-www-form-urlencoded")
    assert mcp.start(flow, state, (ENTRY.mcp,)) == (None, True)
    assert mcp.judge(flow, state, Decision.allow(ENTRY), ProxyMetrics()).allowed
    assert flow.response is None


def test_a_body_elsewhere_that_cannot_be_held_is_refused_when_it_may_be_json() -> None:
    big = b"x" * 2_000_000
    flow, state = request("POST", "/upload", big, Content_Type="application/json")
    refused, held = mcp.start(flow, state, (ENTRY.mcp,))
    assert refused is not None and refused.reason is Reason.MCP_BAD_REQUEST and not held
    flow, state = request("POST", "/upload", big, Content_Type="application/octet-stream")
    assert mcp.start(flow, state, (ENTRY.mcp,)) == (None, False)
