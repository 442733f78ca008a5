"""The `llm` clause's adapter (addons/clauses/llm.py) on mitmproxy test flows: what it
refuses before reading, the budget checked at admission, the answer metered as it streams
(the usage chunk it asked for left out, the length dropped), and the settlement: the
charge in the state backend, the metrics, the audit fields; a flow that never reached
its upstream costs nothing."""

from __future__ import annotations

import asyncio
import json

from mitmproxy import http
from mitmproxy.test import tflow

from sandbox_egress.addons.clauses.base import Turn
from sandbox_egress.addons.clauses.llm import LlmAdapter, LlmCall
from sandbox_egress.addons.pinning import Pinning
from sandbox_egress.addons.shared import FlowState, Shared
from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.llm import Endpoint
from sandbox_egress.proxy.llm.part import LlmPart, Metered
from sandbox_egress.proxy.llm.requests import Call
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import RequestAnswer
from testbed import model_wire as wire

LLM = {
    "api": "openai",
    "models": ["gpt-5*"],
    "max_output_tokens": 50,
    "budget": {"tokens": "1000/day"},
    "prices": {"gpt-5*": {"input": 1, "output": 2}},
}
NETWORK = parse({"network": {"allowlist": [{"domain": "api.openai.com", "llm": LLM}]}}, "e", {})
ENTRY = NETWORK.allowlist[0]
PART = LlmPart((Metered("api.openai.com", ENTRY.clauses["llm"], Call(Endpoint.CHAT)),))
ALLOWED = Decision.allow(ENTRY)
TOKENS = (("llm_tokens", Rate(1000, 86400)),)


def new_shared() -> Shared:
    metrics = ProxyMetrics()
    return Shared(Policy(NETWORK), metrics, [], None, Pinning(metrics))  # type: ignore[arg-type]


def turn_of(body: bytes, shared: Shared | None = None, **headers: str) -> Turn:
    shared = shared or new_shared()
    flow = tflow.tflow()
    flow.request.method, flow.request.path = "POST", "/v1/chat/completions"
    flow.request.headers.clear()
    flow.request.headers["content-length"] = str(len(body))
    for name, value in headers.items():
        flow.request.headers[name.replace("_", "-")] = value
    flow.request.raw_content = body
    answer = RequestAnswer(ALLOWED, "api.openai.com", parts={"llm": PART})
    return Turn(shared, flow, FlowState(ALLOWED, "api.openai.com"), answer)


def key(turn: Turn) -> BudgetKey:
    return BudgetKey(f"client-{turn.flow.client_conn.peername[0]}", "api.openai.com")


def test_a_body_that_cannot_be_held_is_refused_before_reading() -> None:
    adapter = LlmAdapter()
    for headers in ({"content_encoding": "gzip"}, {"content_length": str(2 * 1024 * 1024)}):
        turn = turn_of(b'{"model": "gpt-5-mini"}', **headers)
        assert asyncio.run(adapter.admit(turn)) is None
        refused = adapter.hold(turn)
        assert isinstance(refused, Decision) and refused.reason is Reason.LLM_BAD_REQUEST


def test_a_stream_metered_charged_and_audited() -> None:
    adapter, body = LlmAdapter(), b'{"model": "gpt-5-mini", "stream": true}'
    turn = turn_of(body)

    async def run() -> tuple[list[bytes], bytes, list[float], Decision | None]:
        assert await adapter.admit(turn) is None and adapter.hold(turn) is True
        assert adapter.judge(turn, ALLOWED) is ALLOWED
        sent = turn.flow.request.raw_content or b""
        content_type, pieces = wire.openai_chat("gpt-5-mini", "a b", (600, 500), True, True)
        turn.flow.response = http.Response.make(
            200, b"", {"content-type": content_type, "content-length": "999"}
        )
        stream = adapter.answer(turn, lambda chunk: chunk)
        out = [b"".join(stream(piece)) for piece in [*pieces, b""]]
        await asyncio.sleep(0)  # the charge task runs
        levels = await turn.shared.state.levels(key(turn), TOKENS)
        return out, sent, levels, await adapter.admit(turn_of(body, turn.shared))

    out, sent, levels, next_call = asyncio.run(run())
    assert json.loads(sent) == {
        "model": "gpt-5-mini",
        "stream": True,
        "max_completion_tokens": 50,
        "stream_options": {"include_usage": True},
    }
    assert turn.flow.request.headers["content-length"] == str(len(sent))
    _, pieces = wire.openai_chat("gpt-5-mini", "a b", (600, 500), True, True)
    assert b"".join(out) == b"".join(p for p in pieces if b'"choices": []' not in p)
    response = turn.flow.response
    assert response is not None and "content-length" not in response.headers
    assert response.headers["transfer-encoding"] == "chunked"
    assert turn.state.audit == {
        "llm_model": "gpt-5-mini",
        "llm_input_tokens": 600,
        "llm_output_tokens": 500,
        "llm_cost_usd": 0.0016,
    }
    assert abs(levels[0] + 100) < 0.1  # 1100 spent of 1000 (refilling 0.01 a second)
    assert next_call is not None and next_call.reason is Reason.LLM_BUDGET_EXCEEDED
    sample = turn.shared.metrics.registry.get_sample_value(
        "egress_llm_tokens_total", {"api": "openai", "glob": "gpt-5*", "direction": "output"}
    )
    assert sample == 500


def test_a_call_that_never_reached_its_upstream_costs_nothing() -> None:
    adapter = LlmAdapter()
    turn = turn_of(b'{"model": "gpt-5-mini"}')

    async def run() -> list[float]:
        await adapter.admit(turn)
        adapter.hold(turn)
        adapter.judge(turn, ALLOWED)
        turn.flow.server_conn.timestamp_tcp_setup = None
        adapter.finish(turn)
        await asyncio.sleep(0)
        return await turn.shared.state.levels(key(turn), TOKENS)

    assert asyncio.run(run()) == [1000.0]
    assert turn.state.audit == {
        "llm_model": "gpt-5-mini",
        "llm_input_tokens": 0,
        "llm_output_tokens": 0,
        "llm_cost_usd": 0.0,
    }
    call = turn.state.parts["llm"]
    assert isinstance(call, LlmCall) and call.settled
