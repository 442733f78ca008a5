"""The load generators, one run = one process, parsed summary: `hey` and `h2load`.

hey keeps `-c` workers busy for `-z` seconds; with `-x` it sends absolute-form
requests for http:// URLs and opens a CONNECT tunnel per connection for https://
ones; `-disable-keepalive` makes every request a new TCP (and TLS) connection.
It speaks HTTP/1.1 (no `-h2`) and does not verify certificates; it negotiates
TLS 1.3 when the server offers it (the probe checks that they do).

`h2load` (nghttp2-client, C) is the HTTP/2 client: the same workload over HTTP/2 or,
with `--h1`, over HTTP/1.1, so the two differ in protocol only. It cannot use a proxy,
so for a proxied run it connects (`--connect-to`) to a `socat` forwarder that opens the
CONNECT tunnel (`bench.throughput.Forwarder`); the TLS session, SNI and ALPN are
h2load's own, end to end with the proxy. It reports no percentiles, only the mean.

The load generator's own CPU time is read from the kernel (`wait4` rusage), so the
report can show that it had headroom.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_RPS = re.compile(r"Requests/sec:\s+([0-9.]+)")
_PCT = re.compile(r"^\s+(\d+)%+ in ([0-9.]+) secs", re.MULTILINE)
_STATUS = re.compile(r"^\s+\[(\d+)\]\s+(\d+) responses", re.MULTILINE)
_ERRORS = re.compile(r"^\s+\[(\d+)\]\s+(.*)$", re.MULTILINE)
_H2_REQUESTS = re.compile(
    r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout"
)
_H2_STATUS = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")
_H2_FINISHED = re.compile(r"finished in ([0-9.]+)(ms|s),")
_H2_PROTOCOL = re.compile(r"Application protocol: (\S+)")
_H2_MEAN = re.compile(r"time for request:\s+\S+\s+\S+\s+([0-9.]+)(us|ms|s)")


@dataclass(frozen=True)
class LoadResult:
    wall_s: float
    rps: float
    ok: int  # 200 responses
    other_status: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None
    client_cpu_s: float
    error_sample: str = ""
    mean_ms: float | None = None  # h2load's only latency figure


def run_hey(
    prefix: list[str],
    url: str,
    *,
    seconds: float,
    concurrency: int,
    proxy: str | None,
    keepalive: bool,
    log: Path,
    rate: float | None = None,
    requests: int | None = None,
) -> LoadResult:
    """`seconds` of load, or with `requests` that many; `rate`: per-worker requests/s."""
    argv = [*prefix, "hey", "-c", str(concurrency), "-t", "10"]
    argv += ["-n", str(requests)] if requests else ["-z", f"{seconds}s"]
    if rate:
        argv += ["-q", f"{rate:g}"]
    argv += ["-disable-compression", "-disable-redirects"]
    if not keepalive:
        argv.append("-disable-keepalive")
    if proxy:
        argv += ["-x", proxy]
    argv.append(url)
    wall, text, client_cpu = _run(argv, seconds, log)
    return parse(text, wall, client_cpu)


def run_h2load(
    prefix: list[str],
    url: str,
    *,
    seconds: float,
    concurrency: int,
    connect_to: str | None,
    http2: bool,
    log: Path,
    warmup: float = 1.0,
    on_measuring: Callable[[], None] | None = None,
) -> LoadResult:
    """`concurrency` connections, one request in flight on each, for `seconds` after a
    `warmup` (connections and handshakes made, not counted); `on_measuring` is called when
    the warm-up ends, so that a caller can start its own counters there."""
    argv = [*prefix, "h2load", "-D", f"{max(1, round(seconds))}", "-c", str(concurrency)]
    argv += ["-m", "1", "-t", "1", f"--warm-up-time={round(warmup * 1000)}ms"]
    if not http2:
        argv.append("--h1")  # otherwise h2load's default offer: h2 first, http/1.1 last
    if connect_to:
        argv.append(f"--connect-to={connect_to}")
    argv.append(url)
    wall, text, client_cpu = _run(argv, seconds + warmup, log, warmup, on_measuring)
    result = parse_h2load(text, wall, client_cpu)
    protocol = _H2_PROTOCOL.search(text)
    wanted = "h2" if http2 else "http/1.1"
    if protocol is None or protocol.group(1) != wanted:
        got = protocol.group(1) if protocol else "none"
        return LoadResult(wall, 0.0, 0, 0, 1, None, None, client_cpu, f"negotiated {got}")
    return result


def _run(
    argv: list[str],
    seconds: float,
    log: Path,
    mark_after: float = 0.0,
    mark: Callable[[], None] | None = None,
) -> tuple[float, str, float]:
    started = time.monotonic()
    with open(log, "w+b") as out:
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
        deadline = started + seconds + 60
        while True:  # bounded: hey stops itself after `seconds`; this is the backstop
            pid, status, usage = os.wait4(popen.pid, os.WNOHANG)
            if pid:
                break
            if mark is not None and time.monotonic() - started >= mark_after:
                mark()
                mark = None
            if time.monotonic() > deadline:
                popen.kill()
                pid, status, usage = os.wait4(popen.pid, 0)
                break
            time.sleep(0.05)
        popen.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        text = out.read().decode(errors="replace")
    if popen.returncode != 0:
        raise RuntimeError(
            f"{argv[len(argv) - 1]}: load generator exited {popen.returncode}: {text[-2000:]}"
        )
    return wall, text, usage.ru_utime + usage.ru_stime


def parse_h2load(text: str, wall: float, client_cpu: float) -> LoadResult:
    counts = _H2_REQUESTS.search(text)
    statuses = _H2_STATUS.search(text)
    mean = _H2_MEAN.search(text)
    finished = _H2_FINISHED.search(text)
    elapsed = wall
    if finished:
        elapsed = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
    if counts is None or statuses is None:
        return LoadResult(wall, 0.0, 0, 0, 1, None, None, client_cpu, text[-300:])
    ok = int(statuses.group(1))
    other = sum(int(statuses.group(i)) for i in (2, 3, 4))
    errors = sum(int(counts.group(i)) for i in (5, 6, 7))
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return LoadResult(
        wall_s=wall,
        rps=ok / elapsed if elapsed else 0.0,
        ok=ok,
        other_status=other,
        errors=errors,
        p50_ms=None,
        p99_ms=None,
        client_cpu_s=client_cpu,
        error_sample="" if not errors else text[-300:],
        mean_ms=float(mean.group(1)) * scale[mean.group(2)] if mean else None,
    )


def parse(text: str, wall: float, client_cpu: float) -> LoadResult:
    rps_match = _RPS.search(text)
    percentiles = {int(p): float(v) * 1000 for p, v in _PCT.findall(text)}
    statuses = {int(code): int(count) for code, count in _STATUS.findall(text)}
    errors_text = text.split("Error distribution:", 1)[1] if "Error distribution:" in text else ""
    errors = [(int(n), what) for n, what in _ERRORS.findall(errors_text)]
    return LoadResult(
        wall_s=wall,
        rps=float(rps_match.group(1)) * statuses.get(200, 0) / max(1, sum(statuses.values()))
        if rps_match
        else 0.0,
        ok=statuses.get(200, 0),
        other_status=sum(c for s, c in statuses.items() if s != 200),
        errors=sum(n for n, _ in errors),
        p50_ms=percentiles.get(50),
        p99_ms=percentiles.get(99),
        client_cpu_s=client_cpu,
        error_sample=errors[0][1][:300] if errors else "",
    )
