"""The budget adapter (addons/clauses/budget.py) on mitmproxy test flows."""

from __future__ import annotations

import asyncio
from typing import Any

from mitmproxy import websocket
from mitmproxy.test import tflow
from wsproto.frame_protocol import Opcode

from sandbox_egress.addons.clauses import budget
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.clauses.budget import Admission
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.state.memory import MemoryState

CONFIG = parse(
    {"network": {"allowlist": [
        {"domain": "hf.example", "budget": {"requests": "1/day", "upload": "1KiB/day"}},
        {"domain": "free.example"},
    ]}},
    "env.yaml",
    {},
)  # fmt: skip
HF, FREE = (Decision.allow(e) for e in CONFIG.allowlist)


def value(metrics: ProxyMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def admit(*args: object) -> tuple[Decision, Admission]:
    return asyncio.run(budget.admit(*args))  # type: ignore[arg-type]


def test_admit_refuses_over_the_request_budget_and_counts() -> None:
    budgets, metrics = MemoryState(), ProxyMetrics()
    assert admit(budgets, metrics, HF, 0)[0] is HF
    refused, admission = admit(budgets, metrics, HF, 0)
    assert (refused.allowed, refused.reason, refused.status) == (
        False, Reason.BUDGET_EXCEEDED, 429)  # fmt: skip
    assert admission.retry_after_s > 0
    assert value(metrics, "egress_budget_exceeded_total", rule="hf.example", budget="requests") == 1
    assert value(metrics, "egress_budget_remaining", rule="hf.example", budget="upload") == 1024
    assert admit(budgets, metrics, FREE, 0)[0] is FREE  # no budget, nothing asked


def test_metered_cuts_the_upload_that_crosses_the_budget() -> None:
    budgets, metrics = MemoryState(), ProxyMetrics()
    flow = tflow.tflow()
    state = FlowState(HF, "hf.example")
    seen: list[bytes] = []

    def count(chunk: bytes) -> bytes:
        seen.append(chunk)
        return chunk

    async def stream() -> list[Any]:
        meter = budget.metered(budgets, metrics, flow, state, count)
        return [meter(b"a" * 600), meter(b"b" * 600), meter(b"c"), meter(b"")]

    # No empty piece once cut: mitmproxy would frame it as a chunked body's end (D620).
    assert asyncio.run(stream()) == [[b"a" * 600], [], [], []]
    assert seen == [b"a" * 600]
    assert state.decision.reason is Reason.BUDGET_EXCEEDED
    assert flow.error is not None  # killed
    assert value(metrics, "egress_budget_exceeded_total", rule="hf.example", budget="upload") == 1
    free = FlowState(FREE, "free.example")
    assert budget.metered(budgets, metrics, flow, free, count) is count


def test_each_sandbox_spends_its_own_budget_and_only_the_nodes_is_shown() -> None:
    budgets, metrics = MemoryState(), ProxyMetrics()
    assert admit(budgets, metrics, HF, 0, "sbx-1")[0] is HF
    assert not admit(budgets, metrics, HF, 0, "sbx-1")[0].allowed
    assert admit(budgets, metrics, HF, 0, "sbx-2")[0] is HF  # its own bucket
    assert value(metrics, "egress_budget_remaining", rule="hf.example", budget="requests") is None
    assert admit(budgets, metrics, HF, 0)[0] is HF  # the node's own clients
    left = value(metrics, "egress_budget_remaining", rule="hf.example", budget="requests")
    assert left is not None and left < 0.01  # refilling at one a day


def test_websocket_messages_count_toward_upload_and_the_crossing_one_closes_the_stream() -> None:
    # A mitmproxy test flow stands in for the upgraded connection; the end-to-end cut is
    # the same `metered` path an HTTP upload takes (tests/e2e/test_budget_e2e.py).
    budgets, metrics = MemoryState(), ProxyMetrics()
    flow = tflow.twebsocketflow()
    state = FlowState(HF, "hf.example")
    flow.request.headers["Upgrade"] = "websocket"
    flow.websocket.messages.clear()

    async def send(content: bytes, from_client: bool = True) -> bool:
        flow.websocket.messages.append(
            websocket.WebSocketMessage(Opcode.BINARY, from_client, content)
        )
        budget.websocket_message(flow)
        return not flow.websocket.messages[-1].dropped

    async def conversation() -> list[bool]:
        budget.websocket_upgrade(budgets, metrics, flow, state, None)  # at the request
        return [
            await send(b"a" * 600),
            await send(b"z" * 5000, from_client=False),  # what the upstream sends is free
            await send(b"b" * 600),
            await send(b"c"),
        ]

    assert asyncio.run(conversation()) == [True, True, False, False]
    assert state.decision.reason is Reason.BUDGET_EXCEEDED
    assert flow.error is not None  # killed, and the client connection hung up
    assert value(metrics, "egress_budget_exceeded_total", rule="hf.example", budget="upload") == 1
