"""The approvals service (proxy/approvals/service.py) on a real event loop and the memory
state backend: one approval for every waiting request, answers, timeouts, the bound per
sandbox, grants kept in the store, a store that cannot answer grants nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from sandbox_egress.proxy.approvals import grants
from sandbox_egress.proxy.approvals.approvers.base import Answer
from sandbox_egress.proxy.approvals.book import AlreadyDecided, Source, State
from sandbox_egress.proxy.approvals.scopes import ONCE, Scope
from sandbox_egress.proxy.approvals.service import Approvals, Verdict
from sandbox_egress.proxy.approvals.settings import ApprovalsConfig
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.state import StateUnavailable
from sandbox_egress.proxy.state.memory import MemoryState

SCOPES = (ONCE, Scope("session"), Scope("1h", 3600.0))
DEST = ("sbx-1", "new.example.com", 443)


class Scripted:
    """An approver answering what it is given, after `delay` seconds; records each ask."""

    kind = "command"

    def __init__(self, answer: Answer | None, delay: float = 0.0) -> None:
        self.answer, self.delay, self.asked = answer, delay, list[dict[str, Any]]()

    async def ask(self, approval: Mapping[str, Any]) -> Answer | None:
        self.asked.append(dict(approval))
        await asyncio.sleep(self.delay)
        return self.answer


def service(
    *approvers: Any, timeout_s: float = 5.0, max_pending: int = 3, state: Any = None
) -> tuple[Approvals, ProxyMetrics]:
    metrics = ProxyMetrics()
    config = ApprovalsConfig(True, timeout_s, max_pending, SCOPES, tuple(approvers))
    return Approvals(state or MemoryState(), metrics.approvals, lambda: config), metrics


def count(metrics: ProxyMetrics, event: str) -> float:
    return metrics.approvals.events.labels(event)._value.get()


async def answer_when_waiting(found: Approvals, waiting: int, *decision: Any) -> None:
    for _ in range(500):
        approvals = found.book.all()
        if approvals and approvals[0].waiting >= waiting:
            await found.decide(approvals[0].id, *decision)
            return
        await asyncio.sleep(0.01)
    raise AssertionError("nobody waited")


def test_off_holds_nothing() -> None:
    async def run() -> None:
        metrics = ProxyMetrics()
        found = Approvals(MemoryState(), metrics.approvals)
        assert await found.judge(DEST, "GET", "/") == Verdict(Reason.NOT_ALLOWLISTED)
        assert found.book.all() == []

    asyncio.run(run())


def test_one_approval_releases_every_waiting_request() -> None:
    async def run() -> None:
        found, metrics = service()
        waiting = [found.judge(DEST, "GET", f"/{n}") for n in range(20)]
        results = await asyncio.gather(
            *waiting, answer_when_waiting(found, 20, "allow", "once", "api")
        )
        [approval] = found.book.all()
        assert {v for v in results[:20]} == {Verdict(Reason.ALLOWLISTED, approval.id, "once")}
        assert (approval.state, approval.waiting, approval.method) == (State.ALLOWED, 0, "GET")
        assert count(metrics, "held") == 1 and count(metrics, "granted") == 20
        # `once`: nothing kept; the next request asks again.
        assert await grants.find(found.state, found.prefix, DEST) is None

    asyncio.run(run())


def test_a_denial_and_a_timeout_refuse() -> None:
    async def run() -> None:
        found, metrics = service(timeout_s=0.2)
        denied, _ = await asyncio.gather(
            found.judge(DEST, "GET", "/"), answer_when_waiting(found, 1, "deny", None, "api")
        )
        assert denied.reason is Reason.APPROVAL_DENIED and denied.approval is not None
        late = await found.judge(DEST, "GET", "/")
        assert late.reason is Reason.APPROVAL_TIMEOUT and late.approval != denied.approval
        assert [a.state for a in found.book.all()] == [State.TIMED_OUT, State.DENIED]
        assert count(metrics, "timed_out") == 1 and count(metrics, "denied") == 1

    asyncio.run(run())


def test_the_bound_per_sandbox() -> None:
    async def run() -> None:
        found, metrics = service(timeout_s=0.3, max_pending=2)
        held = [found.judge(("sbx-1", f"h{n}.example.com", 443), "GET", "/") for n in range(2)]
        tasks = [asyncio.ensure_future(h) for h in held]
        await asyncio.sleep(0.05)
        third = await found.judge(("sbx-1", "h3.example.com", 443), "GET", "/")
        assert third == Verdict(Reason.APPROVAL_LIMIT)
        # Another sandbox has its own bound; the same destination joins its approval.
        other = asyncio.ensure_future(found.judge(("sbx-2", "h3.example.com", 443), "GET", "/"))
        same = asyncio.ensure_future(found.judge(("sbx-1", "h0.example.com", 443), "GET", "/"))
        await asyncio.gather(*tasks, other, same)
        assert len(found.book.all()) == 3 and count(metrics, "limited") == 1

    asyncio.run(run())


def test_a_session_grant_is_kept_and_admits_at_once() -> None:
    async def run() -> None:
        found, metrics = service()
        first, _ = await asyncio.gather(
            found.judge(DEST, "CONNECT", None),
            answer_when_waiting(found, 1, "allow", "session", "api"),
        )
        again = await found.judge(DEST, "CONNECT", None)
        assert again == Verdict(Reason.ALLOWLISTED, first.approval, "session")
        assert len(found.book.all()) == 1
        other = ("sbx-2", "new.example.com", 443)  # another sandbox: not granted
        assert await grants.find(found.state, found.prefix, other) is None
        assert await grants.find(found.state, found.prefix, DEST) is not None
        assert [g["sandbox"] for g in found.documents()["grants"]] == ["sbx-1"]

    asyncio.run(run())


def test_scopes_and_answers_are_checked() -> None:
    async def run() -> None:
        found, _ = service()
        approval = await found.ask_ahead(DEST, Source.ACCESS_REQUEST, "docs")
        assert approval is not None and approval.reason == "docs"
        with pytest.raises(ValueError):
            await found.decide(approval.id, "allow", "2h", "api")  # not in scopes
        with pytest.raises(ValueError):
            await found.decide(approval.id, "maybe", None, "api")
        with pytest.raises(LookupError):
            await found.decide("ap-0000000000000000", "deny", None, "api")
        await found.decide(approval.id, "allow", "once", "api")
        with pytest.raises(AlreadyDecided):
            await found.decide(approval.id, "deny", None, "api")
        # An access request's `once` is kept for the timeout: the next request goes through.
        assert (await found.judge(DEST, "GET", "/")).granted
        await found.close()

    asyncio.run(run())


def test_approvers_in_order_the_first_answer_decides() -> None:
    async def run() -> None:
        silent, yes = Scripted(None), Scripted(Answer("allow", "1h", "ok"))
        never = Scripted(Answer("deny"))
        found, metrics = service(silent, yes, never)
        verdict = await found.judge(DEST, "GET", "/x")
        assert verdict.granted and verdict.scope == "1h"
        assert [len(a.asked) for a in (silent, yes, never)] == [1, 1, 0]
        assert silent.asked[0]["host"] == "new.example.com"
        [approval] = found.book.all()
        assert (approval.decided_by, approval.reason) == ("command", "ok")
        assert count(metrics, "no_answer") == 1

    asyncio.run(run())


def test_a_scope_the_file_does_not_allow_is_no_answer() -> None:
    async def run() -> None:
        forever, no = Scripted(Answer("allow", "30d")), Scripted(Answer("deny", None, "no"))
        found, _ = service(forever, no)
        assert (await found.judge(DEST, "GET", "/")).reason is Reason.APPROVAL_DENIED

    asyncio.run(run())


def test_pending_waits_for_the_api_and_a_slow_approver_is_cut_at_the_deadline() -> None:
    async def run() -> None:
        hook = Scripted(Answer("pending"))
        after = Scripted(Answer("allow"))
        found, _ = service(hook, after, timeout_s=0.3)
        assert (await found.judge(DEST, "GET", "/")).reason is Reason.APPROVAL_TIMEOUT
        assert len(after.asked) == 0  # asked: the answer comes through the API
        slow = Scripted(Answer("allow"), delay=30)
        found, _ = service(slow, timeout_s=0.3)
        started = asyncio.get_running_loop().time()
        assert (await found.judge(DEST, "GET", "/")).reason is Reason.APPROVAL_TIMEOUT
        assert asyncio.get_running_loop().time() - started < 2

    asyncio.run(run())


class Unreachable(MemoryState):
    async def get(self, key: str) -> str | None:
        raise StateUnavailable("down")

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        raise StateUnavailable("down")


def test_a_store_that_cannot_answer_grants_nothing() -> None:
    async def run() -> None:
        found, _ = service(timeout_s=0.2, state=Unreachable())
        allowed, _ = await asyncio.gather(
            found.judge(DEST, "GET", "/"),
            answer_when_waiting(found, 1, "allow", "session", "api"),
        )
        assert allowed.granted  # the waiting request: its own answer
        late = await found.judge(DEST, "GET", "/")
        assert late.reason is Reason.APPROVAL_TIMEOUT  # the session was not kept: held again

    asyncio.run(run())
