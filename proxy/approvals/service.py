"""Holding unknown destinations and answering them (docs/configuration.md#approvals).

`Approvals.judge` is the one call a stage adapter makes when the policy says
`not_allowlisted`: a kept grant admits at once; otherwise, with `unknown: hold`, the
request waits on its destination's approval (one per sandbox, host and port) until an
approver, the admin API or the timeout answers. The answer is a `Verdict`: `allowlisted`
(granted: the adapter judges the destination like an entry naming just that host),
`not_allowlisted` (nothing held: approvals off), or a refusal `approval_denied`,
`approval_timeout`, `approval_limit`.

Invariants: every waiting request has a deadline (the approval's, plus `GRACE_S`); every
asking task is owned (`_tasks`, cancelled by `close`) and bounded by that deadline;
nothing here opens a connection for the held request; a grant is only ever read from or
written to the state backend (`proxy.approvals.grants`), and a store that cannot answer
grants nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.approvals import grants
from sandbox_egress.proxy.approvals.approvers.base import Answer
from sandbox_egress.proxy.approvals.book import (
    AlreadyDecided,
    Approval,
    Book,
    Destination,
    Source,
    State,
)
from sandbox_egress.proxy.approvals.metrics import ApprovalMetrics
from sandbox_egress.proxy.approvals.scopes import ONCE
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS, ApprovalsConfig
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.state import StateBackend

KEPT_GRANTS = 1000  # grants listed by GET /approvals
ROUNDS = 2  # a request whose `once` yes went to another is asked again, once (D540)
GRACE_S = 1.0  # a waiter outlives its approval's deadline by this, then gives up itself
REFUSALS = {
    State.DENIED: Reason.APPROVAL_DENIED,
    State.TIMED_OUT: Reason.APPROVAL_TIMEOUT,
    State.PENDING: Reason.APPROVAL_TIMEOUT,
}

log = logging.getLogger("sandbox_egress.approvals")


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: Reason  # ALLOWLISTED: granted
    approval: str | None = None
    scope: str | None = None

    @property
    def granted(self) -> bool:
        return self.reason is Reason.ALLOWLISTED


class Approvals:
    def __init__(
        self,
        state: StateBackend,
        metrics: ApprovalMetrics,
        config: Callable[[], ApprovalsConfig] = lambda: NO_APPROVALS,
        prefix: str = "egress",
    ) -> None:
        self._config = config  # read per use: a reload replaces the policy, and this with it
        self.state = state
        self.prefix = prefix
        self.metrics = metrics
        self.book = Book()
        self._tasks: set[asyncio.Task[None]] = set()
        self._used: dict[Destination, grants.Grant] = {}  # grants this process made or used

    @property
    def config(self) -> ApprovalsConfig:
        """The settings of the running configuration; open approvals keep their deadlines."""
        return self._config()

    # -- the request path -------------------------------------------------------------------

    async def judge(
        self, destination: Destination, method: str | None, path: str | None
    ) -> Verdict:
        """A `not_allowlisted` destination: granted, held until answered, or refused."""
        for _ in range(ROUNDS):
            verdict = await self._judge(destination, method, path)
            if verdict is not None:
                return verdict
        return Verdict(Reason.APPROVAL_TIMEOUT)

    async def _judge(
        self, destination: Destination, method: str | None, path: str | None
    ) -> Verdict | None:
        """One round; None when the `once` yes this request waited on went to another
        request (D540): it is then asked again."""
        grant = await grants.find(self.state, self.prefix, destination)
        if grant is not None and (
            grant.scope != ONCE.text
            or await grants.claim(self.state, self.prefix, destination, grant.approval)
        ):
            self.metrics.events.labels("granted").inc()
            self._remember(destination, grant)
            return Verdict(Reason.ALLOWLISTED, grant.approval, grant.scope)
        config = self.config
        if not config.hold:
            return Verdict(Reason.NOT_ALLOWLISTED)
        approval = self._open(destination, method, path, Source.REQUEST)
        if approval is None:
            return Verdict(Reason.APPROVAL_LIMIT)
        loop = asyncio.get_running_loop()
        started = loop.time()
        approval.waiting += 1
        try:
            async with asyncio.timeout_at(approval.deadline + GRACE_S):
                await approval.answered.wait()
        except TimeoutError:
            pass
        finally:
            approval.waiting -= 1
            self.metrics.held_seconds.observe(loop.time() - started)
        if approval.state is State.ALLOWED and approval.scope is not None:
            # A `once` kept in the store (an access request, a grant made ahead): one
            # admission, shared with whoever finds the grant itself (D540).
            kept_once = approval.scope.once and approval.source is not Source.REQUEST
            if kept_once and not await grants.claim(
                self.state, self.prefix, destination, approval.id
            ):
                return None
            self.metrics.events.labels("granted").inc()
            return Verdict(Reason.ALLOWLISTED, approval.id, approval.scope.text)
        return Verdict(REFUSALS.get(approval.state, Reason.APPROVAL_TIMEOUT), approval.id)

    def _open(
        self, destination: Destination, method: str | None, path: str | None, source: Source
    ) -> Approval | None:
        config = self.config
        approval, new = self.book.open(
            destination, method, path, source, config.timeout_s, config.max_pending
        )
        if approval is None:
            self.metrics.events.labels("limited").inc()
            return None
        if new:
            self.metrics.events.labels("held").inc()
            self.metrics.pending.set(self.book.open_count())
            log.info(
                "approval %s held: sandbox %s, %s:%s (%s)",
                approval.id, destination[0], destination[1], destination[2], source.value,
            )  # fmt: skip
            task = asyncio.get_running_loop().create_task(self._ask(approval), name=approval.id)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return approval

    async def _ask(self, approval: Approval) -> None:
        """Ask the approvers in order, then wait for an answer through the API; at the
        deadline the approval lapses (`timed_out`)."""
        try:
            async with asyncio.timeout_at(approval.deadline):
                for approver in self.config.approvers:
                    if approval.state is not State.PENDING:
                        return  # answered through the API meanwhile
                    answer = await approver.ask(approval.document())
                    if approval.state is not State.PENDING:
                        return  # answered through the API meanwhile
                    if answer is None or not await self._answered(approval, answer, approver.kind):
                        self.metrics.events.labels("no_answer").inc()
                        continue
                    break
                await approval.answered.wait()
        except TimeoutError:
            if approval.state is State.PENDING:
                self._decided(self.book.decide(approval, State.TIMED_OUT, by="timeout"))

    async def _answered(self, approval: Approval, answer: Answer, by: str) -> bool:
        """Apply an approver's answer; False when it is not one (a scope not allowed)."""
        if answer.decision == "pending":
            return True
        try:
            await self.decide(approval.id, answer.decision, answer.scope, by, answer.reason)
        except ValueError:
            return False
        return True

    # -- answers: approvers, the admin API, the sandbox ---------------------------------------

    async def decide(
        self,
        approval_id: str,
        decision: str,
        scope_text: str | None,
        by: str,
        reason: str | None = None,
    ) -> Approval:
        """Answer an approval. LookupError: unknown id; AlreadyDecided; ValueError: not
        `allow`/`deny`, or a scope an approver may not grant."""
        approval = self.book.get(approval_id)
        if approval is None:
            raise LookupError(approval_id)
        if approval.state is not State.PENDING:
            raise AlreadyDecided(approval_id)
        if decision == "deny":
            self._decided(self.book.decide(approval, State.DENIED, by=by, reason=reason))
            return approval
        scope = self.config.scope(scope_text or "once")
        if decision != "allow" or scope is None:
            raise ValueError("expected decision allow or deny and a scope of approvals.scopes")
        if not scope.once or approval.source is not Source.REQUEST:
            expires = time.time() + scope.ttl_s(self.config.timeout_s)
            grant = grants.Grant(approval.id, scope.text, expires)
            await grants.keep(self.state, self.prefix, approval.destination, grant)
            self._remember(approval.destination, grant)
        self._decided(self.book.decide(approval, State.ALLOWED, scope, by, reason))
        return approval

    def _remember(self, destination: Destination, grant: grants.Grant) -> None:
        if len(self._used) >= KEPT_GRANTS:
            now = time.time()
            self._used = {d: g for d, g in self._used.items() if g.expires > now}
            if len(self._used) >= KEPT_GRANTS:
                self._used.clear()  # shown only: the store keeps the grants themselves
        self._used[destination] = grant

    def _decided(self, approval: Approval) -> None:
        self.metrics.events.labels(approval.state.value).inc()
        self.metrics.pending.set(self.book.open_count())
        log.info(
            "approval %s %s by %s (scope %s, %d waiting)",
            approval.id, approval.state.value, approval.decided_by,
            approval.scope.text if approval.scope else None, approval.waiting,
        )  # fmt: skip

    async def ask_ahead(
        self, destination: Destination, source: Source, reason: str | None = None
    ) -> Approval | None:
        """A pending approval made before any request waits (an access request); None past
        `max_pending`. Joins the destination's open approval when there is one."""
        approval = self._open(destination, None, None, source)
        if approval is not None and reason and approval.reason is None:
            approval.reason = reason
        return approval

    def documents(self) -> dict[str, Any]:
        """`GET /approvals`: every remembered approval and the grants made or used here."""
        now = time.time()
        return {
            "approvals": [a.document() for a in self.book.all()],
            "grants": [g.document(d) for d, g in self._used.items() if g.expires > now],
        }

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["AlreadyDecided", "Approvals", "Verdict"]
