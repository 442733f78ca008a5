"""Budgets on the request stage (docs/configuration.md#budgets): admit or refuse a request
by its entry's budget, and meter the body it streams.

`admit` runs after the request was allowed: over its budget it becomes `budget_exceeded`
(429 with `Retry-After`, nothing upstream). `metered` wraps the byte counter of an
allowed request's streamed body: the chunk that crosses the upload budget is not
forwarded, the flow is killed and the client connection closed (the upload is cut), and
the cut is counted. The key is the entry's pattern and the client's sandbox (None for
the node's own clients); the node's remaining budgets are exported by entry pattern
(`egress_budget_remaining`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from mitmproxy import http

from sandbox_egress.addons import mitm
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.addons.workarounds import hang_up
from sandbox_egress.proxy.budget import Admission, Budget, BudgetKey, Budgets
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics


def key_of(decision: Decision, sandbox: str | None = None) -> BudgetKey | None:
    entry = decision.entry
    if entry is None or entry.budget is None:
        return None
    return BudgetKey(sandbox, entry.pattern)


def admit(
    budgets: Budgets,
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
    admission = budgets.admit(key, entry.budget, body, time.monotonic())
    report(budgets, metrics, key, entry.budget)
    if admission.admitted:
        return decision, admission
    metrics.budget_exceeded.labels(key.entry, admission.budget).inc()
    return Decision.deny(Reason.BUDGET_EXCEEDED, entry, decision.clause), admission


def report(budgets: Budgets, metrics: ProxyMetrics, key: BudgetKey, budget: Budget) -> None:
    """The gauge shows the node's own budgets; a sandbox's are counted when exceeded
    (`egress_budget_exceeded_total`), not shown one by one (D107)."""
    if key.sandbox is not None:
        return
    now = time.monotonic()
    for kind, rate in (("requests", budget.requests), ("upload", budget.upload)):
        if rate is not None:
            left = budgets.remaining(key, kind, rate, now)
            metrics.budget_remaining.labels(key.entry, kind).set(left)


def metered(
    budgets: Budgets,
    metrics: ProxyMetrics,
    flow: http.HTTPFlow,
    state: FlowState,
    count: Callable[[bytes], bytes],
    sandbox: str | None = None,
) -> Callable[[bytes], bytes]:
    """`count`, cutting the upload that crosses the entry's upload budget."""
    key, entry = key_of(state.decision, sandbox), state.decision.entry
    if key is None or entry is None or entry.budget is None or entry.budget.upload is None:
        return count
    budget = entry.budget
    cut = False

    def meter(chunk: bytes) -> bytes:
        nonlocal cut
        if cut:
            return b""
        if budgets.take_upload(key, budget, len(chunk), time.monotonic()):
            return count(chunk)
        cut = True
        metrics.budget_exceeded.labels(key.entry, "upload").inc()
        state.decision = Decision.deny(Reason.BUDGET_EXCEEDED, entry, state.decision.clause)
        mitm.kill(flow)
        asyncio.get_running_loop().call_soon(hang_up, flow.client_conn)
        return b""

    return meter
