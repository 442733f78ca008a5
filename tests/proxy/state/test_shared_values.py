"""`lock`/`unlock` and `get`/`put` on every backend (issue 34, D232): what the fleet's
refresh of a rotating token needs. Each backend is opened twice, as two replicas (or two
workers) would: the node service over a real Unix socket, Redis on a real redis-server,
and the `on_error` fallback around Redis; `memory` is one process, one handle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.proxy.state import MAX_VALUE, StateBackend, StateUnavailable
from sandbox_egress.proxy.state.backends import open_state
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.node import NodeService, NodeState
from sandbox_egress.proxy.state.settings import OnError, StateConfig
from testbed.redisserver import RedisServer, start_redis

Pair = tuple[StateBackend, StateBackend]


@asynccontextmanager
async def memory(_path: Path, _redis: RedisServer) -> AsyncIterator[Pair]:
    one = MemoryState()
    yield one, one


@asynccontextmanager
async def node(path: Path, _redis: RedisServer) -> AsyncIterator[Pair]:
    service = NodeService(path / "state.sock")
    service.start()
    pair = (NodeState(str(service.path)), NodeState(str(service.path)))
    try:
        yield pair
    finally:
        for worker in pair:
            await worker.close()
        service.stop()


def _redis_pair(prefix: str) -> Callable[[Path, RedisServer], Any]:
    @asynccontextmanager
    async def opened(path: Path, redis: RedisServer) -> AsyncIterator[Pair]:
        config = StateConfig("redis", redis.url, key_prefix=f"{prefix}-{path.name}", timeout_s=5)
        pair = (open_state(config), open_state(config))  # each wrapped in its on_error
        try:
            yield pair
        finally:
            for replica in pair:
                await replica.close()

    return opened


BACKENDS = {"memory": memory, "node": node, "redis (fallback)": _redis_pair("values")}


@pytest.mark.parametrize("opened", BACKENDS.values(), ids=BACKENDS.keys())
def test_one_holder_at_a_time_and_values_both_see(
    opened: Any, tmp_path: Path, redis: RedisServer
) -> None:
    async def scenario() -> list[object]:
        async with opened(tmp_path, redis) as (a, b):
            seen: list[object] = [await a.lock("k", 30), await b.lock("k", 30)]
            if a is not b:  # another holder cannot release it
                seen += [await b.unlock("k"), await b.lock("k", 30)]
            seen += [await a.unlock("k"), await a.unlock("k"), await b.lock("k", 30)]
            seen += [await b.unlock("k"), await a.get("v")]
            await a.put("v", "tokens-1", 30)
            seen += [await b.get("v")]
            await b.put("v", "tokens-2", 30)
            seen += [await a.get("v")]
            with pytest.raises(ValueError, match=f"at most {MAX_VALUE} bytes"):
                await a.put("v", "x" * (MAX_VALUE + 1), 30)
            await a.put("v", "é" * (MAX_VALUE // 2), 30)  # UTF-8 bytes are counted
            seen += [len(await b.get("v") or "")]
            return seen

    seen = asyncio.run(scenario())
    shared = [False, False] if len(seen) == 12 else []
    assert seen == [
        True,
        False,
        *shared,
        True,
        False,
        True,
        True,
        None,
        "tokens-1",
        "tokens-2",
        MAX_VALUE // 2,
    ]


@pytest.mark.parametrize("opened", BACKENDS.values(), ids=BACKENDS.keys())
def test_a_dead_holders_lock_and_an_old_value_lapse(
    opened: Any, tmp_path: Path, redis: RedisServer
) -> None:
    async def scenario() -> list[object]:
        async with opened(tmp_path, redis) as (a, b):
            taken = await a.lock("dead", 0.2)  # its holder never unlocks
            await a.put("old", "tokens", 0.2)
            before = [await b.lock("dead", 30), await b.get("old")]
            await asyncio.sleep(0.4)
            return [taken, *before, await b.lock("dead", 30), await b.get("old")]

    assert asyncio.run(scenario()) == [True, False, "tokens", True, None]


@pytest.mark.parametrize(("on_error", "kept"), [(OnError.LOCAL, "tokens"), (OnError.DENY, None)])
def test_a_stopped_store_keeps_values_locally_or_fails_closed(
    tmp_path: Path, on_error: OnError, kept: str | None
) -> None:
    store = start_redis(tmp_path)

    async def stopped() -> list[object]:
        state = open_state(StateConfig("redis", store.url, timeout_s=1.0, on_error=on_error))
        store.stop()
        try:
            await state.put("v", "tokens", 30)
            return [await state.lock("k", 30), await state.get("v"), await state.unlock("k")]
        except StateUnavailable:
            return [None]
        finally:
            await state.close()

    found = asyncio.run(stopped())
    assert found == ([True, "tokens", True] if kept else [None])


def test_the_node_service_refuses_a_malformed_value_line(tmp_path: Path) -> None:
    service = NodeService(tmp_path / "bad.sock")
    service.start()
    assert service.answer(b'{"op": "put", "key": "v"}') == b'{"error": "bad request"}'
    assert service.answer(b'{"op": "unlock", "key": "k"}') == b'{"error": "bad request"}'
    service.stop()
