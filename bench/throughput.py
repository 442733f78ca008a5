"""Scenario 1: throughput, latency and proxy CPU per request, contenders alternated run by run.

Workloads against the host under test (an allowlist entry with a transform), with hey:
* `http_keepalive`: plain HTTP, absolute-form requests on kept-alive connections;
* `https_keepalive`: HTTPS through CONNECT, intercepted, kept-alive inside the tunnel;
* `https_new_conn`: HTTPS, a new TCP connection, CONNECT and TLS handshake per request;
and with h2load, the intercepted keep-alive workload again, once per client protocol:
* `h2load_h1`: HTTP/1.1 end to end; `h2load_h2`: HTTP/2 end to end (h2load offers `h2`
  then `http/1.1`, nginx chooses `h2`, the proxy gives the client the upstream's choice,
  D19). One request in flight per connection, like hey's. squid speaks no HTTP/2 to
  clients, so it runs `h2load_h1` only.

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
from bench.loadgen import LoadResult, run_h2load, run_hey

# A run whose failures exceed this share of its requests is reported as invalid.
MAX_ERROR_SHARE = 0.005


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    scheme: str
    keepalive: bool
    client: str = "hey"  # or "h2load-h1", "h2load-h2"


WORKLOADS = (
    Workload("http_keepalive", "(a) plain HTTP, keep-alive", "http", True),
    Workload("https_keepalive", "(b) HTTPS via CONNECT, intercepted, keep-alive", "https", True),
    Workload("https_new_conn", "(c) HTTPS, new connection and TLS per request", "https", False),
    Workload(
        "h2load_h1", "(d) as (b), h2load speaking HTTP/1.1 to the proxy", "https", True, "h2load-h1"
    ),
    Workload(
        "h2load_h2", "(e) as (b), h2load speaking HTTP/2 to the proxy", "https", True, "h2load-h2"
    ),
)
HEY_WORKLOADS = tuple(w for w in WORKLOADS if w.client == "hey")


@dataclass(frozen=True)
class Target:
    name: str
    proxy: str | None  # http://127.0.0.1:PORT, None for direct
    pid: int | None  # the process whose CPU is charged
    tunnel: str | None = None  # 127.0.0.1:PORT of its CONNECT forwarder (h2load)
    http2: bool = False  # speaks HTTP/2 to clients

    def runs(self, workload: Workload) -> bool:
        if workload.client == "h2load-h2":
            return self.http2
        return workload.client == "hey" or self.proxy is None or self.tunnel is not None


def run_once(
    prefix: list[str],
    target: Target,
    workload: Workload,
    seconds: float,
    concurrency: int,
    log: Path,
) -> dict[str, Any]:
    cpu_before = [procs.tree_cpu_seconds(target.pid) if target.pid else 0.0]

    def measuring() -> None:  # h2load: after its warm-up, its connections are made
        if target.pid:
            cpu_before[0] = procs.tree_cpu_seconds(target.pid)

    result: LoadResult
    if workload.client == "hey":
        result = run_hey(
            prefix,
            f"{workload.scheme}://{TARGET}/",
            seconds=seconds,
            concurrency=concurrency,
            proxy=target.proxy,
            keepalive=workload.keepalive,
            log=log,
        )
    else:
        result = run_h2load(
            prefix,
            f"{workload.scheme}://{TARGET}/",
            seconds=seconds,
            concurrency=concurrency,
            connect_to=target.tunnel,
            http2=workload.client == "h2load-h2",
            log=log,
            on_measuring=measuring,
        )
    cpu = procs.tree_cpu_seconds(target.pid) - cpu_before[0] if target.pid else None
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
        "mean_ms",
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
        w.key: {t.name: [] for t in targets if t.runs(w)} for w in WORKLOADS
    }
    for workload in WORKLOADS:  # warm-up: certificates generated, pools and caches filled
        for target in targets:
            if target.runs(workload):
                warmup = log_dir / "warmup.load"
                run_once(prefix, target, workload, warmup_seconds, concurrency, warmup)
    for round_number in range(rounds):
        order = targets[round_number % len(targets) :] + targets[: round_number % len(targets)]
        for workload in WORKLOADS:
            for target in order:
                if not target.runs(workload):
                    continue
                log = log_dir / f"load-{workload.key}-{target.name}-{round_number}.txt"
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
