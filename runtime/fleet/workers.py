"""Multi-worker mode (`--workers N`): N proxy processes share one listen port.

The parent validates the configuration, creates the CA and the upstream trust,
then starts N workers — the same `egress-proxy run` command with `--worker K` —
each one a full mitmproxy event loop bound with SO_REUSEPORT, so the kernel
spreads new connections over them and throughput scales with cores.

The parent serves `/metrics` (every worker's series, summed, through
prometheus_client's multiprocess mode) and `/healthz` (200 once every worker is
listening), forwards SIGHUP and SIGTERM, and exits when any worker exits, so a
supervisor sees a failure instead of a proxy silently running at reduced size.

Invariants:
* Nothing listens on the proxy port before every check the single-process
  proxy makes has passed (the parent runs them; each worker runs them again).
* Workers share nothing in memory but the budgets: each decides with its own copy of
  the configuration, which a SIGHUP reloads in every worker; with the memory state
  backend this process holds the budgets and the workers ask it over a Unix socket
  (`proxy.state.node`, D218), so a budget is one budget for the node; with
  `--admin-token-file` this process answers `GET /usage` from it (D572).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client import multiprocess as prometheus_multiprocess

from sandbox_egress.common.serve import MetricsServer
from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.proxy.config.loader import NetworkConfig
from sandbox_egress.proxy.state.node import SOCKET_ENV, NodeService
from sandbox_egress.proxy.tenancy import sandboxes
from sandbox_egress.runtime.status import INTERVAL_S, ProbedState, StatusBoard
from sandbox_egress.runtime.usageapi import NodeUsage

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_ENV = "EGRESS_WORKER_READY_DIR"
START_TIMEOUT_S = 60.0


def worker_ready(index: int) -> None:
    """Called by a worker once it listens: the parent counts these files."""
    ready_dir = os.environ.get(READY_ENV)
    if ready_dir:
        Path(ready_dir, f"worker-{index}").touch()


def _current(path: str, start: NetworkConfig) -> Callable[[], NetworkConfig]:
    """The file as a SIGHUP would reload it in the workers (the last good one)."""
    kept = [start]

    def current() -> NetworkConfig:
        with contextlib.suppress(configuration.ConfigError):  # the workers keep it too
            kept[0] = configuration.load(path)
        return kept[0]

    return current


def run_workers(
    argv: list[str],
    count: int,
    config_path: str,
    metrics: tuple[str, int],
    admin_token: str | None = None,
) -> int:
    """Start `count` workers running `argv` (the parent's own `run` arguments); with a
    token, the node's model API spending on the admin API (`GET /usage`, D572)."""
    network = configuration.load(config_path)  # refuse a bad file before anything starts
    state = Path(tempfile.mkdtemp(prefix="egress-proxy-"))
    multiproc, ready = state / "metrics", state / "ready"
    multiproc.mkdir()
    ready.mkdir()
    registry = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(  # type: ignore[no-untyped-call]  # unannotated
        registry, path=str(multiproc)
    )
    ProcessCollector(registry=registry)  # process_* of this parent; workers' are not summed (D73)
    server = MetricsServer(metrics, registry)  # OSError (port in use) goes to the CLI
    board, rescan = _status(config_path, network, count)
    server.status = board.document
    env = {**os.environ, MULTIPROC_ENV: str(multiproc), READY_ENV: str(ready)}
    # One budget per node (D218): this process holds the memory; the workers ask it.
    budgets = NodeService(state / "budgets.sock") if network.state.backend == "memory" else None
    if budgets is not None:
        budgets.start()
        env[SOCKET_ENV] = str(budgets.path)
        if admin_token is not None:
            server.admin = NodeUsage(budgets, admin_token, _current(config_path, network))
    command = [sys.executable, "-m", "sandbox_egress.runtime.cli", *argv]
    workers: list[subprocess.Popen[bytes]] = []
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = stopping or signum != signal.SIGHUP
        if stopping:
            server.draining.set()  # each worker drains; /healthz says so at once
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signum)

    previous = {
        s: signal.signal(s, forward) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)
    }
    try:
        for index in range(count):
            workers.append(subprocess.Popen([*command, "--worker", str(index)], env=env))
        server.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        probed = 0.0
        while not stopping and all(w.poll() is None for w in workers):
            if time.monotonic() - probed > INTERVAL_S:
                probed = time.monotonic()
                board.reloaded()
                rescan()
                asyncio.run(board.refresh())
            if not server.ready.is_set() and len(list(ready.iterdir())) == count:
                server.ready.set()
                print(f"egress-proxy: {count} workers ready", file=sys.stderr, flush=True)
            if not server.ready.is_set() and time.monotonic() > deadline:
                print("egress-proxy: workers did not start in time", file=sys.stderr, flush=True)
                break
            time.sleep(0.1)
        failed = [w for w in workers if w.poll() not in (None, 0)]
        return 0 if stopping and not failed else 1
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        server.stop()
        if budgets is not None:
            budgets.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        shutil.rmtree(state, ignore_errors=True)


def _status(
    config_path: str, network: configuration.NetworkConfig, count: int
) -> tuple[StatusBoard, Callable[[], object]]:
    """The parent's /status (the workers' configuration, sandboxes and state, probed) and
    how to bring its sandboxes up to date (on the parent's loop, never the server's)."""
    section = sandboxes.node_section(config_path)
    state = ProbedState(network.state)
    if section is None:
        return StatusBoard(config_path, state, None, workers=count), lambda: None
    directory = sandboxes.SandboxDirectory(section.directory, section.secrets, secrets=False)
    board = StatusBoard(
        config_path, state, lambda: list(directory.sandboxes), workers=count,
        refused=directory.refused,
    )  # fmt: skip
    return board, directory.scan


def share_listen_port() -> None:
    """In a worker: make mitmproxy's listeners bind with SO_REUSEPORT.

    mitmproxy opens its TCP listeners with `asyncio.start_server` and offers no
    option for the flag; this process exists only to run that proxy, so the
    default is set for the process rather than patching mitmproxy's classes.
    """
    import asyncio
    import functools

    if not getattr(asyncio.start_server, "_egress_reuse_port", False):
        wrapped = functools.partial(asyncio.start_server, reuse_port=True)
        wrapped._egress_reuse_port = True  # type: ignore[attr-defined]
        asyncio.start_server = wrapped
