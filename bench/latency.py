"""Scenario 7: the latency a proxy adds at low load, what an agent notices.

One client (hey, `-c 1`), one request every 50 ms (`-q 20`), `requests` requests per
run, over HTTPS kept alive inside an intercepted tunnel and over HTTPS with a new
connection per request; every contender and direct, in `rounds` rounds with the order
rotated. Reported per contender: p50 and p99 (median over the rounds) and what it adds
to direct's p50/p99 of the same run.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.allowlist import TARGET
from bench.loadgen import run_hey
from bench.throughput import HEY_WORKLOADS, MAX_ERROR_SHARE, Target

RATE = 20.0  # requests per second: one per 50 ms
WORKLOADS = tuple(w for w in HEY_WORKLOADS if w.scheme == "https")


def measure(
    prefix: list[str],
    targets: list[Target],
    *,
    requests: int,
    rounds: int,
    log_dir: Path,
    progress: Any = print,
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "rate_per_s": RATE,
        "requests": requests,
        "rounds": rounds,
        "workloads": {},
    }
    for workload in WORKLOADS:
        runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
        for round_number in range(rounds):
            shift = round_number % len(targets)
            for target in targets[shift:] + targets[:shift]:
                result = run_hey(
                    prefix,
                    f"{workload.scheme}://{TARGET}/",
                    seconds=requests / RATE,
                    concurrency=1,
                    proxy=target.proxy,
                    keepalive=workload.keepalive,
                    log=log_dir / f"latency-{workload.key}-{target.name}-{round_number}.txt",
                    rate=RATE,
                    requests=requests,
                )
                total = result.ok + result.other_status + result.errors
                ok = result.ok > 0 and total - result.ok <= MAX_ERROR_SHARE * total
                runs[target.name].append(
                    {"p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "valid": ok}
                )
                progress(
                    f"  latency {round_number + 1}/{rounds} {workload.key:16} {target.name:13}"
                    f" p50 {_ms(result.p50_ms)} ms p99 {_ms(result.p99_ms)} ms"
                )
        summary: dict[str, dict[str, Any]] = {}
        for name, each in runs.items():
            valid = [r for r in each if r["valid"] and r["p50_ms"] is not None]
            summary[name] = {"valid_runs": len(valid), "runs": each}
            for key in ("p50_ms", "p99_ms"):
                summary[name][key] = statistics.median(r[key] for r in valid) if valid else None
        direct = summary.get("direct", {})
        for entry in summary.values():
            for key in ("p50_ms", "p99_ms"):
                value, base = entry[key], direct.get(key)
                entry[f"added_{key}"] = (
                    value - base if value is not None and base is not None else None
                )
        found["workloads"][workload.key] = {"title": workload.title, "contenders": summary}
    return found


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
