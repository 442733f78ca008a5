"""A proxy process of a test's own (not the session proxy): started, scraped, measured, reloaded.

Tests that change the configuration, count series, or measure memory need a proxy
whose whole life they see. `start_proxy` runs `egress-proxy run` inside a namespace
and waits for /healthz; `ProxyProcess` scrapes /metrics through a socket factory (so
the metrics address may live in a namespace the root one cannot route to), reads
the process's memory from /proc, and sends SIGHUP.

Invariants: only the pid started here is ever signalled; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed import procs
from testbed.rawhttp import Conn

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
RESULTS_FILE = Path(os.environ.get("EGRESS_E2E_RESULTS", "/tmp/egress-e2e-results.json"))


@dataclass
class ProxyProcess:
    child: procs.Child
    config: Path
    audit: Path
    metrics_socket: Callable[[], socket.socket]

    @property
    def pid(self) -> int:
        return self.child.pid

    def _get(self, path: str) -> tuple[int, bytes]:
        with Conn.over(self.metrics_socket()) as conn:
            response = conn.request("GET", path, [("Host", "metrics"), ("Connection", "close")])
        return response.status, response.body

    def healthz(self) -> int:
        return self._get("/healthz")[0]

    def status(self) -> dict[str, Any]:
        """`GET /status`, parsed (runtime/status.py)."""
        status, body = self._get("/status")
        assert status == 200, f"/status answered {status}"
        found: dict[str, Any] = json.loads(body)
        return found

    def metrics_text(self) -> str:
        status, body = self._get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return body.decode()

    def scrape(self) -> Samples:
        samples: Samples = {}
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def status_kib(self, field_name: str) -> int:
        """A `/proc/<pid>/status` memory field (VmRSS, VmHWM), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        raise KeyError(field_name)

    def reload(self, timeout: float = 10.0) -> dict[str, float]:
        """SIGHUP, then wait until a reload counter moved; returns the counters after."""
        before = reload_counts(self.scrape())
        os.kill(self.pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while True:
            after = reload_counts(self.scrape())
            if after != before:
                return after
            if not self.child.alive() or time.monotonic() > deadline:
                raise AssertionError(f"no reload counted after SIGHUP\n{self.child.output()}")
            time.sleep(0.05)


def reload_counts(samples: Samples) -> dict[str, float]:
    return {
        dict(labels)["result"]: value
        for (name, labels), value in samples.items()
        if name == "egress_config_reloads_total"
    }


def start_proxy(
    name: str,
    exec_prefix: Sequence[str],
    egress_proxy: Path,
    config: Path,
    args: Sequence[str],
    log_dir: Path,
    env: dict[str, str],
    metrics_socket: Callable[[], socket.socket],
) -> ProxyProcess:
    audit = log_dir / f"{name}-audit.jsonl"
    argv = [*exec_prefix, str(egress_proxy), "run", "--config", str(config)]
    argv += [*args, "--audit-log", str(audit)]
    child = procs.start(name, argv, log_dir, env=env)
    proxy = ProxyProcess(child, config, audit, metrics_socket)

    def healthy() -> bool:
        try:
            return proxy.healthz() == 200
        except OSError:
            return False

    try:
        procs.wait_until(f"{name} /healthz", healthy, timeout=30, child=child)
    except BaseException:
        child.stop()
        raise
    return proxy


@dataclass
class RssSampler:
    """Samples a process's VmRSS every `interval` seconds in a thread; keeps the peak."""

    proxy: ProxyProcess
    interval: float = 0.05
    peak_kib: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sample()

    def _sample(self) -> None:
        try:
            self.peak_kib = max(self.peak_kib, self.proxy.status_kib("VmRSS"))
            self.samples += 1
        except (OSError, KeyError):
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()


def record_result(key: str, value: Any) -> None:
    """Print a measured figure and merge it into the results JSON file (for the docs)."""
    print(f"\n[measured] {key}: {json.dumps(value)}", flush=True)
    try:
        results = json.loads(RESULTS_FILE.read_text()) if RESULTS_FILE.exists() else {}
    except (OSError, ValueError):
        results = {}
    results[key] = value
    RESULTS_FILE.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
