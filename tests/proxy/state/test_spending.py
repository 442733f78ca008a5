"""Spending metered after the fact (issue 46, the `llm:` clause): admitted while a whole
unit is left, charged once known, exact across the workers of one node (the parent's
service over a real Unix socket) and across replicas on one real redis-server; the Redis
scripts decide as the memory buckets do on the same clock (hypothesis)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.budget import Admission, BudgetKey, Budgets, Rate
from sandbox_egress.proxy.state.backends import open_state
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.node import NodeService, NodeState
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import OnError, StateConfig
from testbed.redisserver import RedisServer

TOKENS = Rate(1000, 86400)
COST = Rate(5_000_000, 86400)
RATES = (("llm_tokens", TOKENS), ("llm_cost", COST))
_keys = itertools.count()


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def key() -> BudgetKey:
    return BudgetKey(f"sb{next(_keys)}", "api.openai.com")


async def sequence(states: list[Any], charge: int) -> list[Admission]:
    """Admit and charge `charge` tokens (and a thousandth of it in cost) until refused."""
    found, at = [], key()
    for n in range(6):
        admission = await states[n % len(states)].admit_spending(at, RATES)
        found.append(admission)
        if admission.admitted:
            charges = (("llm_tokens", TOKENS, charge), ("llm_cost", COST, charge * 1000))
            await states[n % len(states)].charge(at, charges)
    return found


def check_sequence(found: list[Admission]) -> None:
    # 300 a call: 0, 300, 600, 900 spent are below 1000; 1200 is not.
    assert [a.admitted for a in found] == [True] * 4 + [False] * 2
    refused = found[4]
    assert refused.budget == "llm_tokens"
    # 201 tokens short at 1000 a day: 201 * 86.4 s
    assert abs(refused.retry_after_s - 17367) <= 1


def test_memory() -> None:
    check_sequence(run(sequence([MemoryState()], 300)))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[NodeService]:
    found = NodeService(tmp_path / "budgets.sock")
    found.start()
    yield found
    found.stop()


def test_the_workers_of_a_node_share_spending_exactly(service: NodeService) -> None:
    async def workers() -> tuple[list[Admission], list[float]]:
        states = [NodeState(str(service.path)), NodeState(str(service.path))]
        found = await sequence(states, 300)
        at = key()
        charges = (("llm_tokens", TOKENS, 7), ("llm_cost", COST, 7000))
        await asyncio.gather(*(states[n % 2].charge(at, charges) for n in range(40)))
        levels = await states[0].levels(at, RATES)
        for state in states:
            await state.close()
        return found, levels

    found, levels = run(workers())
    check_sequence(found)
    # what refilled while the test ran (58 nano-USD a second) is all that differs;
    # one lost charge would be 7 tokens and 7000 nano-USD
    assert levels[0] == pytest.approx(1000 - 280, abs=0.5)
    assert levels[1] == pytest.approx(5_000_000 - 280_000, abs=500)


def test_two_replicas_share_spending_exactly_in_redis(redis: RedisServer) -> None:
    config = StateConfig("redis", redis.url, key_prefix="llm", timeout_s=5.0)

    async def replicas() -> tuple[list[Admission], list[float], list[str]]:
        states = [open_state(config), open_state(config)]
        found = await sequence(states, 300)
        at = key()
        charges = (("llm_tokens", TOKENS, 7), ("llm_cost", COST, 7000))
        await asyncio.gather(*(states[n % 2].charge(at, charges) for n in range(40)))
        levels = await states[1].levels(at, RATES)
        remote = RedisState(config)
        named = await remote.sandboxes("api.openai.com", "llm_tokens")
        await remote.close()
        for state in states:
            await state.close()
        return found, levels, named

    found, levels, named = run(replicas())
    check_sequence(found)
    # what refilled while the test ran (58 nano-USD a second) is all that differs;
    # one lost charge would be 7 tokens and 7000 nano-USD
    assert levels[0] == pytest.approx(1000 - 280, abs=0.5)
    assert levels[1] == pytest.approx(5_000_000 - 280_000, abs=500)
    assert len(named) == 2 and all(name.startswith("sb") for name in named)


def test_an_unreachable_store_refuses_or_decides_locally(tmp_path: Path) -> None:
    gone = f"unix://{tmp_path}/gone.sock"

    async def ask(on_error: OnError) -> Admission:
        state = open_state(StateConfig("redis", gone, timeout_s=0.5, on_error=on_error))
        at = key()
        await state.charge(at, (("llm_tokens", TOKENS, 5000),))
        admission = await state.admit_spending(at, RATES)
        await state.close()
        return admission

    assert run(ask(OnError.DENY)) == Admission(False, unavailable=True)
    local = run(ask(OnError.LOCAL))  # the charge was kept in this process's memory
    assert (local.admitted, local.budget) == (False, "llm_tokens")


arrivals = st.lists(
    st.tuples(st.integers(0, 90_000), st.sampled_from(["admit", "charge"]), st.integers(0, 900)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=25, deadline=None)
@given(arrivals)
def test_the_scripts_decide_as_the_memory_buckets(
    redis: RedisServer, steps: list[tuple[int, str, int]]
) -> None:
    at, memory, now_ms = key(), Budgets(), 0
    rates = (("llm_tokens", Rate(1000, 60)),)

    async def replay() -> list[tuple[tuple[bool, int], tuple[bool, int]]]:
        nonlocal now_ms
        state = RedisState(StateConfig("redis", redis.url, key_prefix="replay", timeout_s=5.0))
        seen = []
        for gap, op, size in steps:
            now_ms += gap
            state.clock = str(now_ms * 1000)
            if op == "charge":
                await state.charge(at, (("llm_tokens", rates[0][1], size),))
                memory.charge(at, "llm_tokens", rates[0][1], size, now_ms / 1000)
                continue
            remote = await state.admit_spending(at, rates)
            local = memory.below(at, rates, now_ms / 1000)
            seen.append(
                ((remote.admitted, remote.retry_after_s), (local.admitted, local.retry_after_s))
            )
        await state.close()
        return seen

    for remote, local in run(replay()):
        assert remote[0] == local[0]
        assert abs(remote[1] - local[1]) <= 1
