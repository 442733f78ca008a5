"""Where budgets are kept (docs/configuration.md#state, issue 34): one small interface,
`StateBackend`, and one module per backend behind it.

The budget stage (`addons.clauses.budget`) asks its backend once per decision:
* `admit(key, budget, body, reserve)` — one request with a body of `body` bytes (None:
  unknown, 0: none); an admitted request also spends `reserve` upload bytes at once (a
  backend that meters chunk by chunk, `memory`, spends none and says so in
  `Admission.reserved`).
* `spend(key, rate, size)` — `size` streamed upload bytes; False once the upload crossed.
  `spend_now` is the same answered at once by a backend held in this process, None
  from a remote one (a stream callback cannot wait: `proxy.state.meter` reserves blocks).
* `admit_spending(key, rates)` — admitted while each `(kind, rate)` bucket holds a whole
  unit; spends nothing. `charge(key, charges)` spends `(kind, rate, amount)` once a
  request's spending is known (the `llm:` clause's tokens and cost, issue 46), possibly
  below zero. `levels(key, rates)` reads what is left (negative: overspent).
* `lock(key, ttl_s)` — True when this process took the named lock (for one replica at a
  time, e.g. a rotating refresh token); it lapses after `ttl_s`. `unlock(key)` releases
  it, only when this process still holds it.
* `get(key)` / `put(key, value, ttl_s)` — a small shared value (at most `MAX_VALUE` bytes
  of UTF-8) that lapses after `ttl_s`: the minted tokens of `proxy.credentials.fleet`.
  The store then holds secrets (D233).
* `health()` — "ok" or why not, for `GET /status`.

Backends: `memory` (this process; the default), `node` (the parent of `--workers N` holds
the memory and its workers ask it over a Unix socket, `proxy.state.node`) and `redis`
(one atomic Lua GCRA script per decision on the store's clock, `proxy.state.redis`).
A remote backend raises `StateUnavailable` when it cannot answer in time;
`proxy.state.fallback` turns that into `on_error` (local memory, or deny).
"""

from __future__ import annotations

from typing import Protocol

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Rate

MAX_VALUE = 4096  # bytes: a token pair, never a body


class StateUnavailable(Exception):
    """The store did not answer (unreachable, slow, or an error); never carries a secret."""


class StateBackend(Protocol):
    name: str

    async def admit(
        self, key: BudgetKey, budget: Budget, body: int | None, reserve: int
    ) -> Admission: ...

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool: ...

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> bool | None: ...

    async def admit_spending(
        self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]
    ) -> Admission: ...

    async def charge(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None: ...

    async def levels(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]) -> list[float]: ...

    def remaining(self, key: BudgetKey, kind: str, rate: Rate) -> float | None: ...

    async def lock(self, key: str, ttl_s: float) -> bool: ...

    async def unlock(self, key: str) -> bool: ...

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str, ttl_s: float) -> None: ...

    async def health(self) -> str: ...

    async def close(self) -> None: ...


def budget_key(prefix: str, key: BudgetKey, kind: str) -> str:
    """The store's key of one budget: the budget key, under `key_prefix`. A sandbox id and
    an entry pattern hold no space (`proxy.tenancy.sandboxes`, `proxy.config.patterns`)."""
    return f"{prefix}:budget:{key.sandbox or '-'}:{key.entry}:{kind}"


def bounded(value: str) -> str:
    """`value` when it fits a shared value (`MAX_VALUE`); ValueError otherwise."""
    if len(value.encode()) > MAX_VALUE:
        raise ValueError(f"a shared value holds at most {MAX_VALUE} bytes")
    return value
