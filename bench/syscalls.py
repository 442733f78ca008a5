"""Syscalls per request at low load: what the product does around a lone kept-alive request.

`python -m bench.syscalls [--requests N] [--rate R] [-- EXTRA EGRESS-PROXY ARGS]` (root):
builds the bench's namespaces and upstream, starts egress-proxy with the bench's staged
configuration (bench/staged.py), sends one warm-up request, then attaches
`strace -f -c` to the proxy (every thread) while one client (hey `-c 1`) sends N
kept-alive HTTPS requests at R per second, and prints each syscall's count per request.
Counts, not times (strace slows every call): a write per request is the audit line, a
`futex` is a thread handing the GIL or a queue item to another, `newfstatat`/`stat` are
the file watchers' polls, `epoll_wait` the loop's wake-ups.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import allowlist, contenders, netns, procs
from bench.loadgen import run_hey


def strace_counts(text: str) -> dict[str, int]:
    """syscall → calls, from `strace -c`'s table."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[0].replace(".", "").isdigit() and cells[-1] != "total":
            calls = cells[3]
            if calls.isdigit():
                found[cells[-1]] = int(calls)
    return found


def measure(requests: int, rate: float, extra: tuple[str, ...], work: Path) -> dict[str, float]:
    logs = work / "logs"
    logs.mkdir()
    work.chmod(0o755)
    ns = netns.Namespaces(f"es{os.getpid() % 100000}")
    children: list[procs.Child] = []
    try:
        stage = contenders.build_stage(ns, work, logs)
        children += [stage.servers.nginx, stage.servers.sink]
        egress = contenders.start_egress(
            ns, stage.ca, stage.upstream_pki, stage.policy, work, logs, extra_args=extra
        )
        children.append(egress.child)
        prefix = ns.exec_prefix(ns.client)
        url = f"https://{allowlist.TARGET}/"

        def load(count: int, name: str) -> None:
            log = logs / f"{name}.txt"
            run_hey(prefix, url, seconds=count / rate, concurrency=1, proxy=egress.proxy_url,
                    keepalive=True, log=log, rate=rate, requests=count)  # fmt: skip

        load(1, "warm-up")
        out = work / "strace.txt"
        tracer = subprocess.Popen(
            ["strace", "-f", "-c", "-o", str(out), "-p", str(egress.child.pid)],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # strace attaches to every thread before the first request
        load(requests, "traced")
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        counts = strace_counts(out.read_text())
        return {name: calls / requests for name, calls in sorted(counts.items())}
    finally:
        for child in reversed(children):
            child.stop()
        ns.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.syscalls", description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("extra", nargs="*", help="more egress-proxy run arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="egress-syscalls-") as work:
        per_request = measure(args.requests, args.rate, tuple(args.extra), Path(work))
    print(f"syscalls per request ({args.requests} kept-alive HTTPS requests, {args.rate:g}/s)")
    for name, count in sorted(per_request.items(), key=lambda kv: -kv[1]):
        print(f"{count:8.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
