"""Budgets on the request stage (docs/configuration.md#budgets): admit or refuse a request
by its entry's budget, and meter the body it streams.

`admit` runs after the request was allowed and asks the budget state once
(`proxy.state`: this process's memory, the node's for `--workers N`, or Redis, D217):
over its budget the request becomes `budget_exceeded` (429 with `Retry-After`, nothing
upstream); a shared state that did not answer with `on_error: deny` makes it
`budget_unavailable` (503). `metered` wraps the byte counter of an allowed request's
streamed body (`proxy.state.meter`): the chunk that crosses the upload budget is not
forwarded, the flow is killed and the client connection closed (the upload is cut), and
the cut is counted. The key is the entry's pattern and the client's sandbox (None for
the node's own clients); the node's remaining budgets are exported by entry pattern
(`egress_budget_remaining`) when this process holds them. `websocket_message` meters
what a sandbox sends on an upgraded WebSocket the same way: the message that crosses
the upload budget is dropped and the stream closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from mitmproxy import http

from sandbox_egress.addons import mitm
from sandbox_egress.addons.clauses.base import Adapter, Turn
from sandbox_egress.addons.layers.workarounds import hang_up
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.state import StateBackend
from sandbox_egress.proxy.state.meter import Meter

_tasks: set[asyncio.Task[None]] = set()  # top-ups in flight, held until done
WEBSOCKET_METER = "egress-websocket-meter"  # a WebSocket flow's upload meter, in metadata


def key_of(decision: Decision, sandbox: str | None = None) -> BudgetKey | None:
    entry = decision.entry
    if entry is None or entry.budget is None:
        return None
    return BudgetKey(sandbox, entry.pattern)


async def admit(
    state: StateBackend,
    metrics: ProxyMetrics,
    decision: Decision,
    body: int | None,
    sandbox: str | None = None,
) -> tuple[Decision, Admission]:
    """The decision once the deciding entry's budget has been asked (`body`: its size),
    for the node's own clients (`sandbox` None) or one sandbox of a node proxy."""
    key, entry = key_of(decision, sandbox), decision.entry
    if key is None or entry is None or entry.budget is None or not decision.injects:
        return decision, Admission(True)
    admission = await state.admit(key, entry.budget, body, body or 0)
    report(state, metrics, key, entry.budget)
    if admission.admitted:
        return decision, admission
    if admission.unavailable:
        return Decision.deny(Reason.BUDGET_UNAVAILABLE, entry, decision.clause), admission
    metrics.budget_exceeded.labels(key.entry, admission.budget).inc()
    return Decision.deny(Reason.BUDGET_EXCEEDED, entry, decision.clause), admission


def report(state: StateBackend, metrics: ProxyMetrics, key: BudgetKey, budget: Budget) -> None:
    """The gauge shows the node's own budgets held in this process; a sandbox's are
    counted when exceeded (`egress_budget_exceeded_total`), not shown one by one (D107)."""
    if key.sandbox is not None:
        return
    for kind, rate in (("requests", budget.requests), ("upload", budget.upload)):
        left = None if rate is None else state.remaining(key, kind, rate)
        if left is not None:
            metrics.budget_remaining.labels(key.entry, kind).set(left)


def metered(
    state: StateBackend,
    metrics: ProxyMetrics,
    flow: http.HTTPFlow,
    flow_state: FlowState,
    count: Callable[[bytes], bytes],
    sandbox: str | None = None,
    reserved: int = 0,
) -> Callable[[bytes], bytes] | Callable[[bytes], list[bytes]]:
    """`count`, cutting the upload that crosses the entry's upload budget (`reserved`:
    bytes its admission already spent)."""
    key, entry = key_of(flow_state.decision, sandbox), flow_state.decision.entry
    if key is None or entry is None or entry.budget is None or entry.budget.upload is None:
        return count
    cut = False

    def cut_now() -> None:
        nonlocal cut
        if cut:
            return
        cut = True
        metrics.budget_exceeded.labels(key.entry, "upload").inc()
        flow_state.decision = Decision.deny(
            Reason.BUDGET_EXCEEDED, entry, flow_state.decision.clause
        )
        mitm.kill(flow)
        asyncio.get_running_loop().call_soon(hang_up, flow.client_conn)

    def schedule(spend: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(spend)
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    meter = Meter(state, key, entry.budget.upload, reserved, cut_now, schedule)

    def take(chunk: bytes) -> list[bytes]:
        # None rather than an empty piece: mitmproxy frames `b""` on a chunked upload as
        # its last chunk, so a cut upload reached the upstream looking complete (D620).
        if cut:
            return []
        if meter.take(len(chunk)):
            out = count(chunk)
            return [out] if out else []
        cut_now()
        return []

    return take


def websocket_upgrade(
    state: StateBackend,
    metrics: ProxyMetrics,
    flow: http.HTTPFlow,
    flow_state: FlowState,
    sandbox: str | None,
) -> None:
    """An allowed WebSocket upgrade to a budgeted entry keeps its upload meter in the flow:
    the request's `FlowState` is gone once the 101 is audited, the messages come later."""
    if flow.request.headers.get("upgrade", "").lower() == "websocket":
        meter = metered(state, metrics, flow, flow_state, lambda chunk: chunk, sandbox)
        flow.metadata[WEBSOCKET_METER] = meter


def websocket_message(flow: http.HTTPFlow) -> None:
    """A WebSocket message the sandbox sent counts toward its entry's upload budget (1.11):
    the message that crosses it is dropped and the stream closed (`metered`'s cut)."""
    meter = flow.metadata.get(WEBSOCKET_METER)
    if meter is None or flow.websocket is None or not flow.websocket.messages:
        return
    message = flow.websocket.messages[-1]
    if message.from_client and message.content and not meter(message.content):
        message.drop()  # type: ignore[no-untyped-call]  # mitmproxy leaves it unannotated


class BudgetAdapter(Adapter):
    """The `budget` clause: asked once before the request is applied; what it admitted of
    the body starts the upload meter, and a refusal says when to retry."""

    clause = "budget"

    async def admit(self, turn: Turn) -> Decision | None:
        shared, decision = turn.shared, turn.answer.decision
        sandbox = shared.facts(turn.flow.client_conn).sandbox
        decided, admission = await admit(shared.state, shared.metrics, decision, turn.body, sandbox)
        turn.reserved, turn.retry_after_s = admission.reserved, admission.retry_after_s
        return None if decided.allowed else decided
