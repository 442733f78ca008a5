"""The Redis GCRA scripts (proxy/state/gcra.py) decide as the memory token bucket does:
the same arrival sequence gets the same admissions, Retry-After and upload cuts. The
scripts run on a real redis-server with the test's clock passed in (the only use of the
clock override); the memory side is `proxy.budget.Budgets` on the same clock."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.budget import Budget, BudgetKey, Budgets, Rate
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import StateConfig
from testbed.redisserver import RedisServer

_keys = itertools.count()

rates = st.builds(Rate, st.integers(1, 50), st.sampled_from([1, 60, 3600]))
budgets = st.builds(Budget, st.one_of(st.none(), rates), st.one_of(st.none(), rates)).filter(
    lambda b: b.requests is not None or b.upload is not None
)
ops = st.lists(
    st.tuples(
        st.integers(0, 90_000),  # ms since the previous arrival
        st.sampled_from(["admit", "spend"]),
        st.one_of(st.none(), st.integers(0, 60)),  # body or chunk size (None: unknown)
    ),
    min_size=1,
    max_size=40,
)


def replay(redis: RedisServer, budget: Budget, arrivals: list[tuple[int, str, int | None]]):
    key = BudgetKey(None, f"e{next(_keys)}.test")
    memory, now_ms, seen = Budgets(), 0, []

    async def run() -> None:
        nonlocal now_ms
        state = RedisState(StateConfig("redis", redis.url, timeout_s=5.0))
        try:
            for gap, op, size in arrivals:
                now_ms += gap
                state.clock = str(now_ms * 1000)
                if op == "admit":
                    want = memory.admit(key, budget, size, now_ms / 1000)
                    got = await state.admit(key, budget, size, 0)
                    seen.append((op, want, got))
                elif budget.upload is not None:
                    chunk = size or 1
                    want_spend = memory.take_upload(key, budget, chunk, now_ms / 1000)
                    got_spend = await state.spend(key, budget.upload, chunk)
                    seen.append((op, want_spend, got_spend))
        finally:
            await state.close()

    asyncio.run(run())
    return seen


@settings(max_examples=150, deadline=None)
@given(budgets, ops)
def test_the_script_admits_what_the_memory_bucket_admits(redis, budget, arrivals) -> None:
    for op, want, got in replay(redis, budget, arrivals):
        assert got == want, (op, budget)


CASES = {
    # name: (budget, [(ms gap, op, size)], expected admitted/within flags)
    "a burst of five, then refused": (
        Budget(requests=Rate(5, 60)), [(0, "admit", 0)] * 6, [True] * 5 + [False]),
    "one token back after a fifth of a minute": (
        Budget(requests=Rate(5, 60)), [(0, "admit", 0)] * 6 + [(12_000, "admit", 0)],
        [True] * 5 + [False, True]),
    "a body larger than the whole budget never fits": (
        Budget(upload=Rate(10, 60)), [(0, "admit", 11)], [False]),
    "an upload that crosses is refused next time": (
        Budget(upload=Rate(10, 60)), [(0, "spend", 8), (0, "spend", 8), (0, "admit", 1)],
        [True, False, False]),
}  # fmt: skip


def test_named_sequences(redis) -> None:
    for name, (budget, arrivals, expected) in CASES.items():
        seen = replay(redis, budget, arrivals)
        flags = [got.admitted if op == "admit" else got for op, _, got in seen]
        assert flags == expected, name
        assert all(got == want for _, want, got in seen), name
