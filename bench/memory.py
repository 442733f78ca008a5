"""Scenario 3: egress-proxy's peak memory while 1 GiB streams through it, each way.

The client (this process, its sockets made inside the client namespace) downloads
nginx's sparse 1 GiB file and uploads 1 GiB of zeros to the sink, both inside an
intercepted tunnel; it counts bytes as they pass and keeps at most one 1 MiB chunk.
Before each transfer the proxy's VmHWM is reset to its current RSS (`clear_refs`),
so the VmHWM read afterwards is the peak of that transfer alone; a sampler also
records the highest VmRSS seen every 50 ms as a cross-check. With several
processes (`--workers`), the figures are sums over the proxy's process tree. The same transfers
made directly give the client's own speed, to show it was not the limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bench import netns, procs, wire
from bench.allowlist import BULK_HOST
from bench.upstream import BIG_BYTES, HTTPS_PORT, SINK_PORT


class RssSampler:
    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                rss = sum(procs.status_kib(member, "VmRSS") for member in procs.tree(self.pid))
            except (OSError, KeyError):
                continue  # a process of the tree exited between listing and reading
            self.peak_kib = max(self.peak_kib, rss)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _download(sock_factory: Callable[[], Any]) -> tuple[int, int]:
    with sock_factory() as tls:
        response = wire.request(tls, "GET", "/big", BULK_HOST)
    return response.head.status, response.received


def _upload(sock_factory: Callable[[], Any]) -> tuple[int, int]:
    with sock_factory() as tls:
        response = wire.request(tls, "POST", "/upload", BULK_HOST, body_length=BIG_BYTES)
    counted = int(response.prefix.strip() or b"-1")
    return response.head.status, counted


def measure(ns: str, pid: int, port: int, proxy_ca: str, upstream_ca: str) -> dict[str, Any]:
    def through(upstream_port: int) -> Callable[[], Any]:
        return lambda: wire.wrap(
            wire.tunnel(ns, port, f"{BULK_HOST}:{upstream_port}"), proxy_ca, BULK_HOST
        )

    def direct(upstream_port: int) -> Callable[[], Any]:
        return lambda: wire.wrap(
            wire.connect(ns, netns.UPSTREAM_IP, upstream_port), upstream_ca, BULK_HOST
        )

    results: dict[str, Any] = {"bytes": BIG_BYTES}
    gib = BIG_BYTES / (1 << 30)
    for label, transfer, upstream_port in (
        ("download", _download, HTTPS_PORT),
        ("upload", _upload, SINK_PORT),
    ):
        started, client_cpu = time.monotonic(), time.process_time()
        status, counted = transfer(direct(upstream_port))
        direct_s = time.monotonic() - started
        direct_client_cpu = time.process_time() - client_cpu
        if status != 200 or counted != BIG_BYTES:
            raise RuntimeError(f"direct {label}: status {status}, {counted} bytes")

        members = procs.tree(pid)
        reset = all([procs.reset_peak_rss(member) for member in members])
        before = sum(procs.status_kib(member, "VmRSS") for member in members)
        with RssSampler(pid) as sampler:
            proxy_cpu = procs.tree_cpu_seconds(pid)
            started, client_cpu = time.monotonic(), time.process_time()
            status, counted = transfer(through(upstream_port))
            elapsed = time.monotonic() - started
            client_cpu = time.process_time() - client_cpu
            proxy_cpu = procs.tree_cpu_seconds(pid) - proxy_cpu
        if status != 200 or counted != BIG_BYTES:
            raise RuntimeError(f"{label} through egress-proxy: status {status}, {counted} bytes")
        results[label] = {
            "rss_before_kib": before,
            "processes": len(members),
            "vm_hwm_kib": sum(procs.status_kib(member, "VmHWM") for member in members),
            "hwm_reset": reset,
            "sampled_peak_rss_kib": sampler.peak_kib,
            "seconds": elapsed,
            "mib_per_s": BIG_BYTES / elapsed / (1 << 20),
            "direct_seconds": direct_s,
            "direct_mib_per_s": BIG_BYTES / direct_s / (1 << 20),
            # CPU seconds per GiB: the proxy's (its process tree) and the client's own, the
            # latter through the proxy and direct (its TLS work is the yardstick, issue 36).
            "proxy_cpu_s_per_gib": proxy_cpu / gib,
            "client_cpu_s_per_gib": client_cpu / gib,
            "direct_client_cpu_s_per_gib": direct_client_cpu / gib,
        }
    return results
