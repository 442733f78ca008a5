"""The load generator: `hey` (Go, from Debian), one run = one process, parsed summary.

hey keeps `-c` workers busy for `-z` seconds; with `-x` it sends absolute-form
requests for http:// URLs and opens a CONNECT tunnel per connection for https://
ones; `-disable-keepalive` makes every request a new TCP (and TLS) connection.
It speaks HTTP/1.1 (no `-h2`) and does not verify certificates; it negotiates
TLS 1.3 when the server offers it (the probe checks that they do).

hey's own CPU time is read from the kernel (`wait4` rusage), so the report can show
that the load generator had headroom.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_RPS = re.compile(r"Requests/sec:\s+([0-9.]+)")
_PCT = re.compile(r"^\s+(\d+)%+ in ([0-9.]+) secs", re.MULTILINE)
_STATUS = re.compile(r"^\s+\[(\d+)\]\s+(\d+) responses", re.MULTILINE)
_ERRORS = re.compile(r"^\s+\[(\d+)\]\s+(.*)$", re.MULTILINE)


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


def run_hey(
    prefix: list[str],
    url: str,
    *,
    seconds: float,
    concurrency: int,
    proxy: str | None,
    keepalive: bool,
    log: Path,
) -> LoadResult:
    argv = [*prefix, "hey", "-z", f"{seconds}s", "-c", str(concurrency), "-t", "10"]
    argv += ["-disable-compression", "-disable-redirects"]
    if not keepalive:
        argv.append("-disable-keepalive")
    if proxy:
        argv += ["-x", proxy]
    argv.append(url)
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
        raise RuntimeError(f"hey exited {popen.returncode}: {text[-2000:]}")
    return parse(text, wall, usage.ru_utime + usage.ru_stime)


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
