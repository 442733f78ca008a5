"""`state.on_error` around a remote backend (issue 34): when the store does not answer in
time, `local` decides in this process's memory and `deny` refuses (503
`budget_unavailable`; a streaming upload is cut). Each unanswered decision is counted
(`unavailable(outcome)`); the log says so once per transition, not once per request.

`observed` is the health the last real operation showed ("ok", or "unreachable (Cause)")
with its wall time: `GET /status` reports it when it is newer than the last probe, so a
probe that timed out at start does not outlive the decisions that succeed after it (D401).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Rate
from sandbox_egress.proxy.state import StateBackend, StateUnavailable
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.settings import OnError

log = logging.getLogger("egress")


class Fallback:
    def __init__(
        self,
        remote: StateBackend,
        on_error: OnError,
        unavailable: Callable[[str], None] = lambda _outcome: None,
    ) -> None:
        self.remote = remote
        self.name = remote.name
        self.local = MemoryState()
        self.on_error = on_error
        self.reachable = True
        self.observed: tuple[str, float] | None = None
        self._unavailable = unavailable

    def _up(self) -> None:
        self.observed = ("ok", time.time())
        if not self.reachable:
            self.reachable = True
            log.warning("budget state %s: reachable again; budgets are shared", self.name)

    def _down(self, why: StateUnavailable) -> str:
        outcome = self.on_error.value
        self.observed = (f"unreachable ({why})", time.time())
        if self.reachable:
            self.reachable = False
            then = "deciding budgets locally" if outcome == "local" else "refusing budgeted"
            log.warning("budget state %s: unavailable (%s); %s", self.name, why, then)
        self._unavailable(outcome)
        return outcome

    async def admit(
        self, key: BudgetKey, budget: Budget, body: int | None, reserve: int
    ) -> Admission:
        try:
            admission = await self.remote.admit(key, budget, body, reserve)
        except StateUnavailable as exc:
            if self._down(exc) == "deny":
                return Admission(False, unavailable=True)
            return self.local.admit_now(key, budget, body)
        self._up()
        return admission

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        try:
            within = await self.remote.spend(key, rate, size)
        except StateUnavailable as exc:
            return self._down(exc) == "local" and self.local.spend_now(key, rate, size)
        self._up()
        return within

    async def admit_spending(
        self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]
    ) -> Admission:
        try:
            admission = await self.remote.admit_spending(key, rates)
        except StateUnavailable as exc:
            if self._down(exc) == "deny":
                return Admission(False, unavailable=True)
            return await self.local.admit_spending(key, rates)
        self._up()
        return admission

    async def charge(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None:
        """A charge the store did not take is kept locally (`local`) or lost (`deny`: the
        store refuses the next admissions until it answers)."""
        try:
            await self.remote.charge(key, charges)
        except StateUnavailable as exc:
            if self._down(exc) == "local":
                self.local.charge_now(key, charges)
            return
        self._up()

    async def levels(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]) -> list[float]:
        return await self.remote.levels(key, rates)

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> bool | None:
        return self.remote.spend_now(key, rate, size)

    def remaining(self, key: BudgetKey, kind: str, rate: Rate) -> float | None:
        return self.remote.remaining(key, kind, rate)

    async def lock(self, key: str, ttl_s: float) -> bool:
        try:
            taken = await self.remote.lock(key, ttl_s)
        except StateUnavailable as exc:
            return self._down(exc) == "local" and self.local.lock_now(key, ttl_s)
        self._up()
        return taken

    # The shared values of `proxy.credentials.fleet`: `local` keeps them in this process
    # (its minter refreshes alone), `deny` lets StateUnavailable through (it fails closed).
    async def unlock(self, key: str) -> bool:
        try:
            released = await self.remote.unlock(key)
        except StateUnavailable as exc:
            if self._down(exc) == "deny":
                raise
            return self.local.unlock_now(key)
        self._up()
        return released

    async def get(self, key: str) -> str | None:
        try:
            value = await self.remote.get(key)
        except StateUnavailable as exc:
            if self._down(exc) == "deny":
                raise
            return self.local.get_now(key)
        self._up()
        return value

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        try:
            await self.remote.put(key, value, ttl_s)
        except StateUnavailable as exc:
            if self._down(exc) == "deny":
                raise
            self.local.put_now(key, value, ttl_s)
            return
        self._up()

    async def health(self) -> str:
        return await self.remote.health()

    async def close(self) -> None:
        await self.remote.close()
