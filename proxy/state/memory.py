"""The `memory` state backend: this process's budgets (`proxy.budget.Budgets`) on the
monotonic clock — the single-process proxy's default, and what `on_error: local` falls
back to. Every call answers at once; `spend_now` is how a stream is metered chunk by
chunk without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Budgets, Rate
from sandbox_egress.proxy.state import bounded


class MemoryState:
    name = "memory"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.budgets = Budgets()
        self._clock = clock
        self._locks: dict[str, tuple[float, str]] = {}  # key -> (lapses at, holder)
        self._values: dict[str, tuple[float, str]] = {}  # key -> (lapses at, value)

    def clock(self) -> float:
        return self._clock()

    async def admit(
        self, key: BudgetKey, budget: Budget, body: int | None, reserve: int
    ) -> Admission:
        return self.admit_now(key, budget, body)

    def admit_now(self, key: BudgetKey, budget: Budget, body: int | None) -> Admission:
        """Today's admission: nothing of the body is spent until it streams."""
        return self.budgets.admit(key, budget, body, self._clock())

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        return self.spend_now(key, rate, size)

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        return self.budgets.take_upload(key, _upload(rate), size, self._clock())

    async def admit_spending(
        self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]
    ) -> Admission:
        return self.budgets.below(key, rates, self._clock())

    async def charge(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None:
        self.charge_now(key, charges)

    def charge_now(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None:
        now = self._clock()
        for kind, rate, amount in charges:
            self.budgets.charge(key, kind, rate, amount, now)

    async def levels(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]) -> list[float]:
        now = self._clock()
        return [self.budgets.level(key, kind, rate, now) for kind, rate in rates]

    def remaining(self, key: BudgetKey, kind: str, rate: Rate) -> float:
        return self.budgets.remaining(key, kind, rate, self._clock())

    async def lock(self, key: str, ttl_s: float) -> bool:
        return self.lock_now(key, ttl_s)

    def lock_now(self, key: str, ttl_s: float, holder: str = "") -> bool:
        now = self._clock()
        if self._locks.get(key, (0.0, ""))[0] > now:
            return False
        self._locks = {k: held for k, held in self._locks.items() if held[0] > now}
        self._locks[key] = (now + ttl_s, holder)
        return True

    async def unlock(self, key: str) -> bool:
        return self.unlock_now(key)

    def unlock_now(self, key: str, holder: str = "") -> bool:
        held = self._locks.get(key)
        if held is None or held[0] <= self._clock() or held[1] != holder:
            return False
        del self._locks[key]
        return True

    async def get(self, key: str) -> str | None:
        return self.get_now(key)

    def get_now(self, key: str) -> str | None:
        kept = self._values.get(key)
        return kept[1] if kept is not None and kept[0] > self._clock() else None

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        self.put_now(key, value, ttl_s)

    def put_now(self, key: str, value: str, ttl_s: float) -> None:
        now = self._clock()
        self._values = {k: kept for k, kept in self._values.items() if kept[0] > now}
        self._values[key] = (now + ttl_s, bounded(value))

    async def health(self) -> str:
        return "ok"

    async def close(self) -> None:
        return None


def _upload(rate: Rate) -> Budget:
    return Budget(upload=rate)
