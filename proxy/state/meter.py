"""Metering a streamed upload against a backend without a round trip per chunk.

mitmproxy calls a request's stream callable once per chunk and cannot wait for it, so:
* a body of announced length was spent whole when it was admitted (`Admission.reserved`):
  its chunks only count down that allowance;
* a backend held in this process (`spend_now`) answers each chunk at once — today's
  memory behaviour, exact to the chunk;
* otherwise the chunk that outruns the allowance is forwarded and owed, and one request
  to the store spends what is owed plus a block (`block_of`); while it is out, further
  chunks are owed too. The answer that the upload crossed its budget cuts it (`cut`).
  What a remote store can over-admit is therefore what streams during one round trip
  after the crossing, and an unknown-length upload is charged at most one block it
  did not send (a 64th of the budget, at most 64 KiB) (docs/decisions.md D220).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.state import StateBackend

BLOCK = 64 * 1024
Schedule = Callable[[Coroutine[Any, Any, None]], object]


def block_of(rate: Rate) -> int:
    return max(1, min(BLOCK, rate.amount // 64))


class Meter:
    def __init__(
        self,
        state: StateBackend,
        key: BudgetKey,
        rate: Rate,
        reserved: int,
        cut: Callable[[], None],
        schedule: Schedule,
    ) -> None:
        self.state, self.key, self.rate = state, key, rate
        self.allowance = reserved
        self.owed = 0
        self.asking = False
        self.crossed = False
        self._cut, self._schedule = cut, schedule

    def take(self, size: int) -> bool:
        """Count one chunk of `size` bytes: False once the upload crossed (do not send it)."""
        if self.crossed:
            return False
        if size <= self.allowance:
            self.allowance -= size
            return True
        beyond, self.allowance = size - self.allowance, 0
        now = self.state.spend_now(self.key, self.rate, beyond)
        if now is not None:
            self.crossed = not now
            return now
        self.owed += beyond
        self._ask()
        return True

    def _ask(self) -> None:
        if self.asking or self.crossed:
            return
        self.asking = True
        owed, self.owed = self.owed, 0
        self._schedule(self._spend(owed, block_of(self.rate)))

    async def _spend(self, owed: int, block: int) -> None:
        try:
            within = await self.state.spend(self.key, self.rate, owed + block)
        finally:
            self.asking = False
        if not within:
            self.crossed = True
            self._cut()
            return
        self.allowance += block
        paid = min(self.owed, self.allowance)  # chunks owed while the store was asked
        self.owed, self.allowance = self.owed - paid, self.allowance - paid
        if self.owed:
            self._ask()
