"""Scenario 8: one client misbehaves; how long does another client wait? (issue 21)

A self-contained run in namespaces of its own (testbed/netns.py): an HTTP echo upstream,
a name server that never answers (testbed/silent_dns.py) and egress-proxy at a
256-descriptor limit. The *other* client sends `requests` sequential GETs of a name in
the proxy's /etc/hosts from inside the proxy's namespace (its own address); its latency
is measured in four phases:

* `quiet`: nobody else;
* `dns_flood`: one client keeps `flood` requests in flight, each for a new name whose
  server never answers (each lookup lasts the resolver's 1 s timeout);
* `dns_flood_shared_pool`: the same with 6 lookups at once and 6 per client (the size
  of the old shared pool): the flood holds every thread, and the other client is
  only served in turn;
* `half_open`: one client holds 300 half-sent request heads.

Figures: median, p95 and max latency and failures of the other client, per phase.
Needs root and `ip`; nothing else of bench/install-deps.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed import nsock, procs
from testbed.netns import UPSTREAM_IP, Topology

REPO = Path(__file__).resolve().parents[1]
EGRESS = Path(sys.executable).parent / "egress-proxy"
PORT, METRICS = 18080, 19464
VICTIM = "victim.fair.test"
CONFIG = 'network:\n  allowlist:\n    - domain: "*.fair.test"\n    - domain: "*.attack.test"\n'
CONFIG += "    - domain: 198.18.1.0/24\n"
HALF_OPEN = 300
OLD_POOL = ("--dns-lookups", "6", "--dns-lookups-per-client", "6")


def _ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p95_ms": None, "max_ms": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(p95 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def _get(topo: Topology, target: str, timeout: float = 15.0) -> int:
    """One GET through the proxy from the proxy's namespace; the status, 0 on failure."""
    try:
        sock = nsock.connect(topo.ns_proxy, (topo.proxy_ip, PORT), timeout=timeout)
    except OSError:
        return 0
    with sock:
        host = target.split("/", 3)[2]
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        try:
            head = sock.recv(64)
        except OSError:
            return 0
        parts = head.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def _victim(topo: Topology, requests: int) -> dict[str, Any]:
    latencies, failures = [], 0
    for _ in range(requests):
        started = time.monotonic()
        status = _get(topo, f"http://{VICTIM}/fair")
        if status == 200:
            latencies.append(time.monotonic() - started)
        else:
            failures += 1
    return {"requests": requests, "failures": failures, **_ms(latencies)}


@contextmanager
def _dns_flood(topo: Topology, inflight: int) -> Iterator[None]:
    """`inflight` attacker threads, each asking for a new never-answering name in a loop."""
    stop = threading.Event()
    counter = iter(range(10**9))

    def attack() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((topo.proxy_ip, PORT), timeout=15) as sock:
                    name = f"n{next(counter)}.attack.test"
                    sock.sendall(f"GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
                    sock.recv(64)
            except OSError:
                continue

    threads = [threading.Thread(target=attack, daemon=True) for _ in range(inflight)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2.0)  # the flood reaches its steady state (a bench, not a test)
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=20)


@contextmanager
def _half_open(topo: Topology) -> Iterator[None]:
    held: list[socket.socket] = []
    try:
        for _ in range(HALF_OPEN):
            try:
                sock = socket.create_connection((topo.proxy_ip, PORT), timeout=5)
                sock.sendall(f"GET http://{VICTIM}/ HTTP/1.1\r\nHost: vic".encode())
            except OSError:
                continue
            held.append(sock)
        yield
    finally:
        for sock in held:
            sock.close()


def _proxy(topo: Topology, work: Path, name: str, extra: tuple[str, ...]) -> procs.Child:
    config = work / "fair.yaml"
    config.write_text(CONFIG)
    argv = [*topo.exec_prefix(topo.ns_proxy), "prlimit", "--nofile=256:256", str(EGRESS), "run"]
    argv += ["--config", str(config), "--listen", f"{topo.proxy_ip}:{PORT}"]
    argv += ["--metrics", f"{topo.proxy_ip}:{METRICS}", "--certs", str(work / "ca")]
    argv += ["--audit-log", str(work / f"{name}-audit.jsonl"), "--dns-cache", "0", *extra]
    child = procs.start(name, argv, work)

    def up() -> bool:
        try:
            with socket.create_connection((topo.proxy_ip, METRICS), timeout=1) as probe:
                probe.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                return probe.recv(12).startswith(b"HTTP/1.0 200")
        except OSError:
            return False

    procs.wait_until(f"{name} listening", up, timeout=30, child=child)
    return child


def measure(requests: int = 40, flood: int = 60, progress: Callable[[str], None] = print) -> Any:
    work = Path(tempfile.mkdtemp(prefix="egress-fair-"))
    topo = Topology(tag=f"ef{os.getpid() % 100000}")
    children: list[procs.Child] = []
    results: dict[str, Any] = {"requests": requests, "flood": flood, "held": HALF_OPEN}
    try:
        topo.build({VICTIM: [UPSTREAM_IP]})
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        echo = [*topo.exec_prefix(topo.ns_upstream), sys.executable, "-m", "testbed.echo_server"]
        echo += ["--log", str(work / "echo.jsonl"), "--ready", str(work / "echo.ready")]
        children.append(procs.start("echo", [*echo, "--echo", f"{UPSTREAM_IP}:80"], work, env))
        procs.wait_until("echo", (work / "echo.ready").exists, 15, children[-1])
        dns = [*topo.exec_prefix(topo.ns_proxy), sys.executable, "-m", "testbed.silent_dns"]
        dns += ["--listen", "127.0.0.1:53", "--log", str(work / "dns.log")]
        children.append(procs.start("silent-dns", dns, work, env))
        procs.wait_until("dns", lambda: "ready" in children[-1].stdout.read_text(), 15)
        for label, extra, phases in [
            ("bounds", (), ("quiet", "dns_flood", "half_open")),
            ("shared_pool", OLD_POOL, ("dns_flood",)),
        ]:
            proxy = _proxy(topo, work, f"proxy-{label}", extra)
            try:
                for phase in phases:
                    progress(f"  fairness: {label} {phase}")
                    if phase == "quiet":
                        found = _victim(topo, requests)
                    elif phase == "dns_flood":
                        with _dns_flood(topo, flood):
                            found = _victim(topo, requests)
                    else:
                        with _half_open(topo):
                            found = _victim(topo, requests)
                    key = phase if label == "bounds" else f"{phase}_{label}"
                    results[key] = found
            finally:
                proxy.stop()
    finally:
        for child in reversed(children):
            child.stop()
        failures = topo.close()
        if failures:
            progress("fairness: cleanup problems: " + "; ".join(failures))
    return results


if __name__ == "__main__":
    import json

    print(json.dumps(measure(), indent=1))
