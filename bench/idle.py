"""Scenario 6: memory per idle intercepted connection (1,000 idle TLS tunnels per proxy).

For each proxy in turn: its RSS (the sum over its process tree) is read, then this
process opens `count` connections through it, each a CONNECT tunnel to the host under
test, a TLS handshake with the proxy's certificate (verified) and one kept-alive GET, so
both legs exist; they are left idle and the RSS read again after a short settle. The
figure is the RSS delta over `count`. Then every connection is closed. The client keeps
all sockets open at once (one TLS socket each, no buffers), from a few threads.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import procs, wire
from bench.allowlist import TARGET
from bench.upstream import HTTPS_PORT

SETTLE_S = 1.0
THREADS = 4


def _tree_rss_kib(pid: int) -> int:
    total = 0
    for member in procs.tree(pid):
        try:
            total += procs.status_kib(member, "VmRSS")
        except (OSError, KeyError):
            continue  # a helper exited between listing and reading
    return total


def _open(ns: str, port: int, proxy_ca: str) -> Any:
    tls = wire.wrap(wire.tunnel(ns, port, f"{TARGET}:{HTTPS_PORT}"), proxy_ca, TARGET)
    response = wire.request(tls, "GET", "/", TARGET)
    if response.head.status != 200:
        tls.close()
        raise RuntimeError(f"GET through the tunnel answered {response.head.status}")
    return tls


def measure_one(ns: str, pid: int, port: int, proxy_ca: str, count: int) -> dict[str, Any]:
    before = _tree_rss_kib(pid)
    started = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(_open, ns, port, proxy_ca) for _ in range(count)]
        sockets, failures = [], []
        for future in futures:
            try:
                sockets.append(future.result(timeout=120))
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(repr(exc)[:200])
    opened_s = time.monotonic() - started
    try:
        time.sleep(SETTLE_S)
        after = _tree_rss_kib(pid)
    finally:
        for sock in sockets:
            sock.close()
    return {
        "connections": len(sockets),
        "failures": len(failures),
        "failure_sample": failures[0] if failures else "",
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_connection": (after - before) / len(sockets) if sockets else None,
        "open_seconds": opened_s,
    }


def measure(
    ns: str, proxies: list[tuple[str, int, int]], proxy_ca: str, count: int = 1000
) -> dict[str, Any]:
    """`proxies`: (name, pid, port) of each proxy, measured one after the other."""
    return {
        "count": count,
        "proxies": {
            name: measure_one(ns, pid, port, proxy_ca, count) for name, pid, port in proxies
        },
    }
