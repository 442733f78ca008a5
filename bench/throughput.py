"""Scenario 1: throughput, latency and proxy CPU per request, contenders alternated run by run.

Three workloads against the host under test (an allowlist entry with a transform):
* `http_keepalive`: plain HTTP, absolute-form requests on kept-alive connections;
* `https_keepalive`: HTTPS through CONNECT, intercepted, kept-alive inside the tunnel;
* `https_new_conn`: HTTPS, a new TCP connection, CONNECT and TLS handshake per request.

Each round runs every workload once for every contender, the contender order
rotated by one each round, so slow drifts of a shared machine spread evenly. The
proxy's CPU time is the utime+stime delta of its process (all threads) and its
live child processes (squid's helpers, egress-proxy's workers) over the run,
divided by the requests answered 200; `util` is that CPU time over the run's
wall time (1.0 = one core busy, the ceiling of a single-threaded proxy);
`client_util` is the same for hey, to show how much of the machine the load took.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import procs
from bench.allowlist import TARGET
from bench.loadgen import LoadResult, run_hey

# A run whose failures exceed this share of its requests is reported as invalid.
MAX_ERROR_SHARE = 0.005


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    scheme: str
    keepalive: bool


WORKLOADS = (
    Workload("http_keepalive", "(a) plain HTTP, keep-alive", "http", True),
    Workload("https_keepalive", "(b) HTTPS via CONNECT, intercepted, keep-alive", "https", True),
    Workload("https_new_conn", "(c) HTTPS, new connection and TLS per request", "https", False),
)


@dataclass(frozen=True)
class Target:
    name: str
    proxy: str | None  # http://127.0.0.1:PORT, None for direct
    pid: int | None  # the process whose CPU is charged


def run_once(
    prefix: list[str],
    target: Target,
    workload: Workload,
    seconds: float,
    concurrency: int,
    log: Path,
) -> dict[str, Any]:
    cpu_before = procs.tree_cpu_seconds(target.pid) if target.pid else 0.0
    result: LoadResult = run_hey(
        prefix,
        f"{workload.scheme}://{TARGET}/",
        seconds=seconds,
        concurrency=concurrency,
        proxy=target.proxy,
        keepalive=workload.keepalive,
        log=log,
    )
    cpu = procs.tree_cpu_seconds(target.pid) - cpu_before if target.pid else None
    record = asdict(result)
    total = result.ok + result.other_status + result.errors
    record["valid"] = result.ok > 0 and (total - result.ok) <= MAX_ERROR_SHARE * total
    record["proxy_cpu_s"] = cpu
    record["proxy_cpu_ms_per_req"] = (
        cpu / result.ok * 1000 if cpu is not None and result.ok else None
    )
    record["proxy_util"] = cpu / result.wall_s if cpu is not None else None
    record["client_util"] = result.client_cpu_s / result.wall_s
    record["client_cpu_ms_per_req"] = result.client_cpu_s / result.ok * 1000 if result.ok else None
    return record


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": quartiles[0],
        "q3": quartiles[2],
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    valid = [r for r in runs if r["valid"]]
    summary: dict[str, Any] = {"runs": len(runs), "valid_runs": len(valid)}
    for metric in (
        "rps",
        "p50_ms",
        "p99_ms",
        "proxy_cpu_ms_per_req",
        "proxy_util",
        "client_util",
        "client_cpu_ms_per_req",
    ):
        summary[metric] = _spread([r[metric] for r in valid if r[metric] is not None])
    return summary


def measure(
    prefix: list[str],
    targets: list[Target],
    *,
    rounds: int,
    seconds: float,
    warmup_seconds: float,
    concurrency: int,
    log_dir: Path,
    progress: Any = print,
) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        w.key: {t.name: [] for t in targets} for w in WORKLOADS
    }
    for workload in WORKLOADS:  # warm-up: certificates generated, pools and caches filled
        for target in targets:
            run_once(prefix, target, workload, warmup_seconds, concurrency, log_dir / "warmup.hey")
    for round_number in range(rounds):
        order = targets[round_number % len(targets) :] + targets[: round_number % len(targets)]
        for workload in WORKLOADS:
            for target in order:
                log = log_dir / f"hey-{workload.key}-{target.name}-{round_number}.txt"
                record = run_once(prefix, target, workload, seconds, concurrency, log)
                runs[workload.key][target.name].append(record)
                progress(
                    f"  round {round_number + 1}/{rounds} {workload.key:16} {target.name:13}"
                    f" {record['rps']:9.1f} req/s"
                    + ("" if record["valid"] else f"  INVALID: {record['error_sample']}")
                )
    return {
        "concurrency": concurrency,
        "rounds": rounds,
        "seconds": seconds,
        "workloads": {
            w.key: {
                "title": w.title,
                "contenders": {
                    name: {"summary": summarise(rs), "runs": rs} for name, rs in runs[w.key].items()
                },
            }
            for w in WORKLOADS
        },
    }
