"""The per-decision cost of each budget state backend (issue 34): one `admit` of a budgeted
request, awaited as the request stage awaits it, in a loop on one event loop.

* memory — this process's token buckets (the single-process default);
* node — the parent's memory over a Unix socket (`--workers N`, proxy.state.node);
* redis (unix) and redis (tcp) — one EVALSHA of the GCRA script on a real redis-server
  (`testbed.redisserver`), over a Unix socket and over TCP on loopback.

Each figure is the median over ROUNDS rounds of LOOPS sequential decisions (one client,
no concurrency: the latency a request pays, not the store's throughput). Run alone:
`python -m bench.budget_state`; `make bench` runs it inside scenario 2.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sandbox_egress.proxy.clauses.budget import Budget, BudgetKey, Rate
from sandbox_egress.proxy.state import StateBackend
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.node import NodeService, NodeState
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import StateConfig
from testbed import procs

LOOPS, ROUNDS = 2000, 5
KEY = BudgetKey(None, "api.example.com")
BUDGET = Budget(requests=Rate(10**9, 60), upload=Rate(10**12, 86400))


async def _per_decision_us(state: StateBackend) -> float:
    await state.admit(KEY, BUDGET, 0, 0)  # connect, load the script
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(LOOPS):
            await state.admit(KEY, BUDGET, 0, 0)
        rounds.append((time.perf_counter() - start) / LOOPS * 1e6)
    await state.close()
    return statistics.median(rounds)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def measure() -> dict[str, Any]:
    results: dict[str, Any] = {"loops": LOOPS, "rounds": ROUNDS, "unit": "µs per decision"}
    results["memory"] = asyncio.run(_per_decision_us(MemoryState()))
    work = Path(tempfile.mkdtemp(prefix="egress-bench-state-"))
    try:
        service = NodeService(work / "budgets.sock")
        service.start()
        try:
            results["node"] = asyncio.run(_per_decision_us(NodeState(str(service.path))))
        finally:
            service.stop()
        server = shutil.which("redis-server")
        if server is None:
            results["redis"] = "redis-server not installed"
            return results
        port = _free_port()
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--unixsocket",
                str(work / "redis.sock"), "--save", "", "--appendonly", "no"]  # fmt: skip
        child = procs.start("redis", argv, work)
        try:
            procs.wait_until("redis", (work / "redis.sock").exists, timeout=20, child=child)
            time.sleep(0.2)  # the TCP listener opens with the socket; settle the first probe
            for name, url in (("redis_unix", f"unix://{work}/redis.sock"),
                              ("redis_tcp", f"redis://127.0.0.1:{port}/0")):  # fmt: skip
                config = StateConfig("redis", url, timeout_s=5.0)
                results[name] = asyncio.run(_per_decision_us(RedisState(config)))
        finally:
            child.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    for name, value in measure().items():
        shown = f"{value:.1f}" if isinstance(value, float) else value
        print(f"{name:>12}: {shown}")
