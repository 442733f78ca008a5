"""`GET /status` (runtime/status.py on common/serve.py): version, the configuration's hash,
the sandboxes loaded, the state backend and its health — served for real on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
from pathlib import Path

from prometheus_client import CollectorRegistry

from sandbox_egress.common.problems import Problem
from sandbox_egress.common.serve import MetricsServer, version
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.settings import StateConfig
from sandbox_egress.runtime.status import ProbedState, StatusBoard


def get(server: MetricsServer, path: str) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


def test_status_says_what_a_rollout_checks(tmp_path: Path) -> None:
    config = tmp_path / "egress.yaml"
    config.write_text("network: {allowlist: [a.example]}\n")
    refused = {
        "sbx-3": (
            Problem("/etc/egress/sandboxes/sbx-3.yaml", "token", "${HOME} is refused", 2, 8),
            Problem("/etc/egress/sandboxes/sbx-3.yaml", "", "no location"),
        )
    }
    board = StatusBoard(config, MemoryState(), lambda: ["sbx-2", "sbx-1"], refused=lambda: refused)
    asyncio.run(board.refresh())
    server = MetricsServer(("127.0.0.1", 0), CollectorRegistry())
    server.start()
    try:
        assert get(server, "/status")[0] == 404  # a server without a board has none
        server.status = board.document
        status, kind, body = get(server, "/status")
        config.write_text("network: {allowlist: [b.example]}\n")
        board.reloaded()
        after = json.loads(get(server, "/status")[2])
    finally:
        server.stop()
    assert (status, kind) == (200, "application/json")
    document = json.loads(body)
    assert document["version"] == version()
    digest = hashlib.sha256(b"network: {allowlist: [a.example]}\n").hexdigest()
    assert document["config"] == {"path": str(config), "sha256": digest}
    assert document["sandboxes"] == {
        "count": 2,
        "ids": ["sbx-1", "sbx-2"],
        "refused": [
            {
                "file": "sbx-3.yaml",
                "sandbox": "sbx-3",
                "problems": ["2:8: token: ${HOME} is refused", "no location"],
            }
        ],
    }
    assert document["state"]["backend"] == "memory" and document["state"]["health"] == "ok"
    assert after["config"]["sha256"] != digest  # a reload shows the new file's hash


def test_the_parents_probe_of_an_unreachable_redis_says_so_without_the_url() -> None:
    state = ProbedState(StateConfig("redis", "redis://:hunter2-secret@127.0.0.1:1/0", timeout_s=1))
    health = asyncio.run(state.health())
    assert health.startswith("unreachable (") and "hunter2" not in health
    assert asyncio.run(ProbedState(StateConfig()).health()) == "ok"


def test_health_follows_the_last_real_operation_after_a_failed_first_probe(
    tmp_path: Path,
) -> None:
    """Issue 48: a probe that failed at start (the store not up yet) no longer outlives the
    decisions that succeed after it: `/status` shows the newer of the two (D401)."""
    from sandbox_egress.proxy.clauses.budget import Budget, BudgetKey, Rate
    from sandbox_egress.proxy.state.backends import open_state
    from testbed.redisserver import start_redis

    config = tmp_path / "egress.yaml"
    config.write_text("network: {allowlist: [a.example]}\n")
    url = f"unix://{tmp_path / 'redis.sock'}"  # where start_redis(tmp_path) listens
    state = open_state(StateConfig("redis", url, timeout_s=1))
    board = StatusBoard(config, state)
    budget = Budget(requests=Rate(10, 60))

    async def scenario() -> tuple[str, str, bool]:
        await board.refresh()  # nothing listens yet
        before = board.document()["state"]["health"]
        server = start_redis(tmp_path)
        try:
            admitted = (await state.admit(BudgetKey(None, "a.example"), budget, 0, 0)).admitted
            after = board.document()["state"]["health"]
        finally:
            server.stop()
            await state.close()
        return before, after, admitted

    before, after, admitted = asyncio.run(scenario())
    assert before.startswith("unreachable (")
    assert (after, admitted) == ("ok", True)
