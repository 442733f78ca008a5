"""The state backends behind one interface (proxy/state/): the node's memory shared by the
workers over a real Unix socket, Redis on a real redis-server, `on_error` when either does
not answer, the `state:` section's problems, and the upload meter's blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Rate
from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.state import StateUnavailable
from sandbox_egress.proxy.state.backends import open_state
from sandbox_egress.proxy.state.fallback import Fallback
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.meter import Meter, block_of
from sandbox_egress.proxy.state.node import SOCKET_ENV, NodeService, NodeState
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import OnError, StateConfig, parse_state
from testbed.redisserver import RedisServer, start_redis

KEY = BudgetKey(None, "api.example")
FIVE = Budget(requests=Rate(5, 60))


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


# -- state: ---------------------------------------------------------------------------------


def problems(state: object) -> list[str]:
    try:
        parse({"network": {"allowlist": []}, "state": state}, "env.yaml", {})
    except ConfigError as error:
        return [f"{p.location}: {p.message}" for p in error.problems]
    return []


def test_the_state_section_is_parsed_with_defaults() -> None:
    assert parse_state({}, lambda *_: None) == StateConfig()
    raw = {"backend": "redis", "url": "redis://redis:6379/0", "timeout": "20ms", "on_error": "deny"}
    assert parse_state({"state": raw}, lambda *_: None) == StateConfig(
        "redis", "redis://redis:6379/0", "egress", 0.02, OnError.DENY
    )


PROBLEMS = {
    "not a mapping": ("redis", ["state: must be a mapping"]),
    "unknown backend": ({"backend": "etcd"}, ["state.backend: expected memory or redis"]),
    "redis without url": ({"backend": "redis"}, ["state.url: backend redis needs url"]),
    "bad timeout": ({"timeout": "soon"}, ["state.timeout: expected a duration"]),
    "too long a timeout": ({"timeout": "11s"}, ["state.timeout: expected a duration"]),
    "bad on_error": ({"on_error": "retry"}, ["state.on_error: expected local or deny"]),
    "bad prefix": ({"key_prefix": "a b"}, ["state.key_prefix: expected 1-64"]),
    "unknown key": ({"backend": "memory", "ttl": 3}, ["state.ttl: unknown key"]),
}


@pytest.mark.parametrize("name", PROBLEMS)
def test_state_problems_are_located(name: str) -> None:
    raw, expected = PROBLEMS[name]
    found = problems(raw)
    assert len(found) == len(expected) and all(
        f.startswith(e) for f, e in zip(found, expected, strict=True)
    ), found


def test_a_url_password_is_never_in_a_problem() -> None:
    found = problems({"backend": "redis", "url": "http://:hunter2-secret@redis:6379"})
    assert found and not any("hunter2" in f for f in found)


def test_a_budget_on_a_passthrough_entry_is_a_located_error() -> None:
    raw = {"domain": "tunnel.example", "passthrough": True, "budget": {"requests": "5/minute"}}
    with pytest.raises(ConfigError) as error:
        parse({"network": {"allowlist": [raw]}}, "env.yaml", {})
    assert [(p.location, p.message) for p in error.value.problems] == [
        ("network.allowlist[0].budget", "a pass-through entry is not intercepted, so it has "
         "nothing to count"),
    ]  # fmt: skip


# -- the node's memory, shared over a Unix socket ----------------------------------------------


@pytest.fixture
def service(tmp_path: Path):
    found = NodeService(tmp_path / "budgets.sock")
    found.start()
    yield found
    found.stop()


def test_workers_share_one_budget_through_the_parents_service(service: NodeService) -> None:
    async def two_workers() -> list[bool]:
        workers = [NodeState(str(service.path)), NodeState(str(service.path))]
        admitted = [(await workers[n % 2].admit(KEY, FIVE, 0, 0)).admitted for n in range(20)]
        for worker in workers:
            assert await worker.health() == "ok"
            await worker.close()
        return admitted

    assert run(two_workers()) == [True] * 5 + [False] * 15


def test_the_service_spends_a_reserved_body_and_locks(service: NodeService) -> None:
    upload = Budget(upload=Rate(100, 60))

    async def ask() -> tuple[Admission, Admission, bool, bool, bool]:
        worker = NodeState(str(service.path))
        first = await worker.admit(KEY, upload, 60, 60)
        second = await worker.admit(KEY, upload, 60, 60)
        crossed = await worker.spend(KEY, Rate(100, 60), 50)
        taken, again = await worker.lock("refresh", 30), await worker.lock("refresh", 30)
        await worker.close()
        return first, second, crossed, taken, again

    first, second, crossed, taken, again = run(ask())
    assert first == Admission(True, reserved=60)
    assert (second.admitted, second.budget) == (False, "upload")  # 40 left, 60 asked
    assert (crossed, taken, again) == (False, True, False)


def test_the_service_answers_garbage_with_an_error(service: NodeService) -> None:
    assert service.answer(b"{not json") == b'{"error": "bad request"}'
    assert service.answer(b'{"op": "admit"}') == b'{"error": "bad request"}'


def test_a_worker_without_its_parent_decides_locally_and_counts(tmp_path: Path) -> None:
    metrics = ProxyMetrics()
    state = open_state(
        StateConfig(), metrics.state_unavailable_inc, {SOCKET_ENV: str(tmp_path / "gone.sock")}
    )
    assert isinstance(state, Fallback) and state.name == "memory"
    admitted = run(many(state, 6))
    assert admitted == [True] * 5 + [False]  # this process's memory: still 5 a minute
    sample = metrics.registry.get_sample_value(
        "egress_state_unavailable_total", {"backend": "node", "outcome": "local"}
    )
    assert sample == 6


async def many(state: Any, count: int) -> list[bool]:
    found = [(await state.admit(KEY, FIVE, 0, 0)).admitted for _ in range(count)]
    await state.close()
    return found


def test_a_single_process_keeps_its_own_memory() -> None:
    assert isinstance(open_state(StateConfig(), environ={}), MemoryState)


# -- Redis -----------------------------------------------------------------------------------


@pytest.fixture
def own_redis(tmp_path: Path):
    server = start_redis(tmp_path)
    yield server
    server.stop()


def test_two_replicas_share_one_budget_in_redis(redis: RedisServer) -> None:
    config = StateConfig("redis", redis.url, key_prefix="share", timeout_s=5.0)

    async def two_replicas() -> list[bool]:
        replicas = [open_state(config), open_state(config)]
        budget = Budget(requests=Rate(10, 60))
        admitted = [(await replicas[n % 2].admit(KEY, budget, 0, 0)).admitted for n in range(20)]
        assert [await r.health() for r in replicas] == ["ok", "ok"]
        assert [await r.lock("refresh", 30) for r in replicas] == [True, False]
        for replica in replicas:
            await replica.close()
        return admitted

    assert run(two_replicas()) == [True] * 10 + [False] * 10


def test_evalsha_falls_back_to_eval_after_the_scripts_are_flushed(redis: RedisServer) -> None:
    async def flushed() -> list[bool]:
        state = RedisState(StateConfig("redis", redis.url, key_prefix="flush", timeout_s=5.0))
        first = (await state.admit(KEY, FIVE, 0, 0)).admitted
        await state._client.script_flush()
        second = (await state.admit(KEY, FIVE, 0, 0)).admitted
        await state.close()
        return [first, second]

    assert run(flushed()) == [True, True]


@pytest.mark.parametrize(
    ("on_error", "expected"),
    [(OnError.LOCAL, Admission(True)), (OnError.DENY, Admission(False, unavailable=True))],
)
def test_redis_stopped_mid_run(own_redis: RedisServer, on_error: OnError, expected) -> None:
    metrics = ProxyMetrics()
    config = StateConfig("redis", own_redis.url, timeout_s=1.0, on_error=on_error)

    async def stopped() -> tuple[Admission, Admission, str, bool]:
        state = open_state(config, metrics.state_unavailable_inc)
        before = await state.admit(KEY, FIVE, 0, 0)
        own_redis.stop()
        after = await state.admit(KEY, FIVE, 0, 0)
        health = await state.health()
        within = await state.spend(KEY, Rate(100, 60), 10)
        await state.close()
        return before, after, health, within

    before, after, health, within = run(stopped())
    assert before.admitted and after == expected
    assert health.startswith("unreachable (")
    assert within is (on_error is OnError.LOCAL)  # deny cuts a streaming upload
    sample = metrics.registry.get_sample_value(
        "egress_state_unavailable_total", {"backend": "redis", "outcome": on_error.value}
    )
    assert sample == 2


def test_an_unreachable_store_raises_without_a_secret() -> None:
    url = "redis://:hunter2-secret@127.0.0.1:1/0"  # nothing listens on port 1

    async def refused() -> str:
        state = RedisState(StateConfig("redis", url, timeout_s=1.0))
        try:
            await state.admit(KEY, FIVE, 0, 0)
        except StateUnavailable as exc:
            return str(exc)
        finally:
            await state.close()
        return "answered"

    why = run(refused())
    assert why != "answered" and "hunter2" not in why


# -- the upload meter ---------------------------------------------------------------------------


class Remote(MemoryState):
    """A memory that answers only asynchronously, like a store: what the meter must handle."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> None:  # type: ignore[override]
        return None

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        self.asked.append(size)
        return super().spend_now(key, rate, size)


def test_a_reserved_body_is_metered_without_asking() -> None:
    remote, cuts = Remote(), []
    meter = Meter(remote, KEY, Rate(1000, 60), 600, lambda: cuts.append(1), lambda c: c.close())
    assert [meter.take(300), meter.take(300)] == [True, True]
    assert remote.asked == [] and cuts == []


def test_an_unknown_length_upload_asks_in_blocks_and_is_cut_once_crossed() -> None:
    rate = Rate(64 * 1000, 60)  # blocks of 1000 bytes
    assert block_of(rate) == 1000

    async def stream() -> tuple[list[bool], list[int], int]:
        remote, cuts = Remote(), []
        loop = asyncio.get_running_loop()
        meter = Meter(remote, KEY, rate, 0, lambda: cuts.append(1), loop.create_task)
        taken = [meter.take(400)]  # owed; one request for it and a block
        await asyncio.sleep(0)
        taken += [meter.take(400), meter.take(400), meter.take(400)]  # a block of 1000: 200 owed
        await asyncio.sleep(0)
        assert remote.asked == [1400, 1200]
        taken.append(meter.take(70_000))  # owed: the store says it crossed
        await asyncio.sleep(0)
        taken.append(meter.take(1))
        return taken, remote.asked, len(cuts)

    taken, asked, cuts = run(stream())
    assert taken == [True, True, True, True, True, False]
    assert asked[-1] == (70_000 - 1000) + 1000 and cuts == 1  # owed, and a block


def test_state_problems_are_placed_at_their_line(tmp_path: Path) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(
        "network:\n  allowlist: [a.example]\nstate:\n  backend: redis\n  timeout: soon\n"
    )
    with pytest.raises(ConfigError) as error:
        configuration.load(path)
    assert [(p.location, p.line) for p in error.value.problems] == [
        ("state.url", 3),  # no url: the section's line
        ("state.timeout", 5),
    ]


# -- a password from a file (issue 48) ------------------------------------------------------


def test_a_password_protected_redis_is_reached_with_the_password_of_a_file(
    tmp_path: Path,
) -> None:
    """`state.password: ${file:...}` (a Kubernetes Secret's file): a store that requires a
    password is reached with it; without it, it is unreachable and says so without a
    secret (D405)."""
    secret = "redis-pw-" + "9f3a" * 4
    server = start_redis(tmp_path, "locked", "--requirepass", secret)
    (tmp_path / "password").write_text(secret + "\n")
    document = {
        "network": {"allowlist": []},
        "state": {
            "backend": "redis",
            "url": server.url,
            "password": "${file:%s}" % (tmp_path / "password"),
            "timeout": "1s",
        },
    }
    try:
        state = parse(document, "env.yaml", {}).state
        assert secret not in repr(state)
        locked = StateConfig("redis", server.url, timeout_s=1)

        async def scenario() -> tuple[bool, str, str]:
            with_password, without = RedisState(state), RedisState(locked)
            try:
                admitted = (await with_password.admit(KEY, FIVE, 0, 0)).admitted
                return admitted, await with_password.health(), await without.health()
            finally:
                await with_password.close()
                await without.close()

        admitted, health, refused = run(scenario())
    finally:
        server.stop()
    assert (admitted, health) == (True, "ok")
    assert refused.startswith("unreachable (") and secret not in refused


def test_a_state_password_is_checked_without_secrets_and_never_shown() -> None:
    raw = {"backend": "redis", "url": "redis://r:6379/0", "password": "${file:/run/secrets/pw}"}
    checked = parse(
        {"network": {"allowlist": []}, "state": raw}, "e.yaml", {}, resolve_secrets=False
    )
    assert checked.state.backend == "redis"
    assert problems({**raw, "password": "${not a name}"}) == [
        "state.password: invalid reference ${not a name} (expected ${NAME} or ${file:/path})"
    ]
    assert problems({**raw, "password": "${UNSET_PW}"}) == [
        "state.password: environment variable UNSET_PW is not set"
    ]
