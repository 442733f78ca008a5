"""The `redis` state backend: budgets every replica shares (issue 34).

Each decision is one atomic Lua GCRA script (`proxy.state.gcra`) on the store's clock,
run by EVALSHA, falling back to EVAL when the store does not know the script (a restart,
a failover, SCRIPT FLUSH); the store then caches it again. Every call is bounded by
`state.timeout`; a refused connection, a timeout or an error reply raises
`StateUnavailable` (`proxy.state.fallback` applies `on_error`). The client (redis-py's
asyncio client) is imported only when this backend is configured.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from typing import Any

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Rate
from sandbox_egress.proxy.state import StateUnavailable, bounded, budget_key
from sandbox_egress.proxy.state.gcra import ADMIT, BELOW, CHARGE, LEVELS, SPEND
from sandbox_egress.proxy.state.settings import StateConfig

_KINDS = {1: "requests", 2: "upload"}
# Release a lock only while this replica still holds it (a lapsed lock may be another's).
UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _escape(text: str) -> str:
    """`text` matched literally by a Redis glob."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _span_us(rate: Rate | None) -> tuple[int, int]:
    return (0, 0) if rate is None else (rate.amount, rate.window_s * 1_000_000)


class RedisState:
    name = "redis"

    def __init__(self, config: StateConfig, client: Any = None) -> None:
        if client is None:
            import redis.asyncio

            client = redis.asyncio.Redis.from_url(
                config.url,
                password=config.password or None,  # state.password; a URL's own wins
                socket_timeout=config.timeout_s,
                socket_connect_timeout=config.timeout_s,
                retry_on_timeout=False,
            )
        self._client = client
        self._prefix = config.key_prefix
        self._timeout = config.timeout_s
        self._sha = {
            s: hashlib.sha1(s.encode()).hexdigest()
            for s in (ADMIT, SPEND, UNLOCK, BELOW, CHARGE, LEVELS)
        }
        self._holder = secrets.token_hex(8)
        self.clock = ""  # tests only: a fixed clock in microseconds replaces the store's

    async def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        import redis.exceptions

        async def call() -> Any:
            try:
                return await self._client.evalsha(self._sha[script], len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                return await self._client.eval(script, len(keys), *keys, *args)

        try:
            return await asyncio.wait_for(call(), self._timeout)
        except (TimeoutError, OSError, redis.exceptions.RedisError) as exc:
            raise StateUnavailable(type(exc).__name__) from None

    async def admit(
        self, key: BudgetKey, budget: Budget, body: int | None, reserve: int
    ) -> Admission:
        keys = [budget_key(self._prefix, key, k) for k in ("requests", "upload")]
        args = [
            *_span_us(budget.requests),
            *_span_us(budget.upload),
            "" if body is None else body,
            reserve if budget.upload is not None else 0,
            self.clock,
        ]
        admitted, wait, by = await self._run(ADMIT, keys, args)
        if admitted:
            return Admission(True, reserved=reserve if budget.upload is not None else 0)
        return Admission(False, int(wait), _KINDS.get(int(by), "requests"))

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        keys = [budget_key(self._prefix, key, "upload")]
        return bool(await self._run(SPEND, keys, [*_span_us(rate), size, self.clock]))

    async def admit_spending(
        self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]
    ) -> Admission:
        keys = [budget_key(self._prefix, key, kind) for kind, _ in rates]
        args = [n for _, rate in rates for n in _span_us(rate)]
        admitted, wait, by = await self._run(BELOW, keys, [*args, self.clock])
        if admitted:
            return Admission(True)
        return Admission(False, int(wait), rates[int(by) - 1][0])

    async def charge(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None:
        keys = [budget_key(self._prefix, key, kind) for kind, _, _ in charges]
        args = [n for _, rate, size in charges for n in (*_span_us(rate), size)]
        await self._run(CHARGE, keys, [*args, self.clock])

    async def levels(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]) -> list[float]:
        keys = [budget_key(self._prefix, key, kind) for kind, _ in rates]
        args = [n for _, rate in rates for n in _span_us(rate)]
        return [float(v) for v in await self._run(LEVELS, keys, [*args, self.clock])]

    async def sandboxes(self, entry: str, kind: str) -> list[str]:
        """The sandboxes with spending of `kind` on `entry` in the store (`usage`)."""
        head = budget_key(self._prefix, BudgetKey(None, entry), kind).split(":-:", 1)[0] + ":"
        tail = f":{entry}:{kind}"
        pattern = _escape(head) + "*" + _escape(tail)
        found: set[str] = set()
        async for name in self._client.scan_iter(match=pattern, count=500):
            text = name.decode() if isinstance(name, bytes) else str(name)
            found.add(text[len(head) : -len(tail)])
        return sorted(found)

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> bool | None:
        return None  # a round trip: streams reserve blocks (proxy.state.meter)

    def remaining(self, key: BudgetKey, kind: str, rate: Rate) -> float | None:
        return None  # kept in the store; the gauge shows this process's memory only

    async def _call(self, call: Any) -> Any:
        import redis.exceptions

        try:
            return await asyncio.wait_for(call, self._timeout)
        except (TimeoutError, OSError, redis.exceptions.RedisError) as exc:
            raise StateUnavailable(type(exc).__name__) from None

    async def lock(self, key: str, ttl_s: float) -> bool:
        name = f"{self._prefix}:lock:{key}"
        px = max(1, int(ttl_s * 1000))
        return bool(await self._call(self._client.set(name, self._holder, nx=True, px=px)))

    async def unlock(self, key: str) -> bool:
        name = f"{self._prefix}:lock:{key}"
        return bool(await self._run(UNLOCK, [name], [self._holder]))

    async def get(self, key: str) -> str | None:
        value = await self._call(self._client.get(f"{self._prefix}:value:{key}"))
        return None if value is None else bytes(value).decode()

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        name, px = f"{self._prefix}:value:{key}", max(1, int(ttl_s * 1000))
        await self._call(self._client.set(name, bounded(value).encode(), px=px))

    async def health(self) -> str:
        import redis.exceptions

        try:
            await asyncio.wait_for(self._client.ping(), self._timeout)
        except (TimeoutError, OSError, redis.exceptions.RedisError) as exc:
            return f"unreachable ({type(exc).__name__})"
        return "ok"

    async def close(self) -> None:
        await self._client.aclose()
