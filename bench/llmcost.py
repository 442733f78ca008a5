"""Scenario 13: the cost of the `llm:` stage on a streamed chat call (issue 46), and of
a variant's code on the same calls (issue 45's before and after).

testbed/model_server.py answers openai `chat/completions` streams (server-sent events,
chunked, a usage chunk) in the upstream namespace on `CHAT_HOST`:`MODEL_PORT`, TLS with
the upstream PKI. Each contender is an `egress-proxy run` of its own in the client
namespace, with a two-entry node file (the upstream's range, and `CHAT_HOST`):
* `egress-proxy`: `CHAT_HOST` a plain entry (no `llm:`);
* `egress-proxy llm`: the same entry with `llm:` (a models glob, `max_output_tokens`,
  token and cost budgets no run reaches, prices): every call is judged, its body
  rewritten (the cap), its stream metered, charged and audited;
* one per `--variant` (its arguments and environment), with the plain entry: a change's
  cost on the same calls (`"before=PYTHONPATH=<old tree>"` runs the old code).

A round runs `calls` calls through each contender, one client process per contender
(bench/llmclient.py: the OpenAI SDK, one kept-alive connection, every answer checked),
the order rotated each round. The figure is the proxy's CPU time (user + system, its
process tree, /proc) over the round divided by the calls — robust on a loaded machine
where wall time is not — and each call's wall time (p50 over all rounds). The ratio to
`egress-proxy` is computed within the run; the llm contender's audit log must hold one
metered line per call, or the run is refused (the stage did not run).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import netns, procs
from bench.allowlist import CHAT_HOST, UPSTREAM_CIDR
from bench.pki import ProxyCa, UpstreamPki, copy_confdir

REPO = Path(__file__).resolve().parents[1]
MODEL_PORT = 9445
PORT = 18300  # + the contender's index
METRICS_PORT = 19700  # + the contender's index
SETTLE_S = 0.3  # after a client exits: the proxy closes its connections
WARMUP_CALLS = 5
BASE = "egress-proxy"
LLM = "egress-proxy llm"
CLAUSE = {
    "api": "openai",
    "models": ["gpt-5*", "gpt-4.1*"],
    "max_output_tokens": 1000,
    "budget": {"tokens": "1000M/second", "cost": "1000000USD/second"},
    "prices": {"gpt-5*": {"input": 0.25, "output": 2.0}, "gpt-4.1*": {"input": 2.0, "output": 8.0}},
}


@dataclass(frozen=True)
class Case:
    name: str
    llm: bool
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def cases(variants: list[tuple[str, tuple[str, ...], dict[str, str]]]) -> list[Case]:
    """The plain and the llm product, then each variant (plain)."""
    found = [Case(BASE, False), Case(LLM, True)]
    found += [Case(name, False, args, tuple(env.items())) for name, args, env in variants]
    return found


def node_document(llm: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"domain": CHAT_HOST, "ports": [MODEL_PORT]}
    if llm:
        entry["llm"] = CLAUSE
    return {"network": {"allowlist": [{"domain": UPSTREAM_CIDR}, entry]}}


def start_model_server(
    ns: netns.Namespaces, pki: UpstreamPki, work: Path, log_dir: Path
) -> procs.Child:
    ready = work / "model.ready"
    argv = [
        *ns.exec_prefix(ns.upstream), sys.executable, "-m", "testbed.model_server",
        "--log", str(work / "model.jsonl"), "--ready", str(ready),
        "--listen-tls", f"{netns.UPSTREAM_IP}:{MODEL_PORT}",
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = procs.start("model-server", argv, log_dir, env=env)
    procs.wait_until("the model server ready", ready.exists, timeout=30, child=child)
    return child


def start_proxy(
    ns: netns.Namespaces,
    case: Case,
    index: int,
    ca: ProxyCa,
    pki: UpstreamPki,
    work: Path,
    log_dir: Path,
) -> procs.Child:
    tag = case.name.replace(" ", "-")
    config = work / f"{tag}.yaml"
    config.write_text(yaml.safe_dump(node_document(case.llm), sort_keys=False))
    port = PORT + index
    argv = [
        *ns.exec_prefix(ns.client), str(Path(sys.executable).parent / "egress-proxy"), "run",
        "--config", str(config), "--listen", f"127.0.0.1:{port}",
        "--metrics", f"127.0.0.1:{METRICS_PORT + index}",
        "--certs", str(copy_confdir(ca, work / f"{tag}-certs")),
        "--audit-log", str(work / f"{tag}-audit.log"), "--upstream-ca", str(pki.ca_cert),
        *case.args,
    ]  # fmt: skip
    child = procs.start(f"llm-{tag}", argv, log_dir, env={**os.environ, **dict(case.env)})
    procs.wait_until(
        f"{case.name} listening on {port}",
        lambda: netns.port_open(ns.client, "127.0.0.1", port),
        timeout=60,
        child=child,
    )
    return child


def client_argv(prefix: list[str], proxy: str, cafile: str, calls: int) -> list[str]:
    return [
        *prefix, sys.executable, "-m", "bench.llmclient",
        "--base-url", f"https://{CHAT_HOST}:{MODEL_PORT}/v1", "--cafile", cafile,
        "--proxy", proxy, "--calls", str(calls),
    ]  # fmt: skip


def run_client(argv: list[str], cwd: Path) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"llm client: exit {done.returncode}: {done.stderr[-2000:]}")
    return [float(s) for s in json.loads(done.stdout.strip().splitlines()[-1])["seconds"]]


def audited_calls(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"llm_model"' in line)


def measure(
    run: Callable[[Case, int], tuple[float, list[float]]],
    all_cases: list[Case],
    rounds: int,
    calls: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """`run(case, calls)` gives (proxy CPU seconds, each call's seconds); every case
    `rounds` times, rotated; the section (ms of CPU per call, p50 latency, ratios)."""
    cpu: dict[str, list[float]] = {c.name: [] for c in all_cases}
    walls: dict[str, list[float]] = {c.name: [] for c in all_cases}
    loads = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    for number in range(rounds):
        shift = number % len(all_cases)
        for case in all_cases[shift:] + all_cases[:shift]:
            spent, seconds = run(case, calls)
            cpu[case.name].append(spent * 1000 / calls)
            walls[case.name].extend(seconds)
            progress(
                f"  round {number + 1} {case.name}: {cpu[case.name][-1]:.2f} ms CPU per call, "
                f"p50 {statistics.median(seconds) * 1000:.1f} ms"
            )
    result: dict[str, Any] = {"rounds": rounds, "calls": calls, "loadavg_before": loads}
    result["contenders"] = {
        name: {
            "cpu_ms_per_call": statistics.median(per_round),
            "cpu_ms_range": [min(per_round), max(per_round)],
            "cpu_ms_rounds": per_round,
            "p50_ms": statistics.median(walls[name]) * 1000,
        }
        for name, per_round in cpu.items()
    }
    return result


def measure_live(
    ns: netns.Namespaces,
    ca: ProxyCa,
    pki: UpstreamPki,
    variants: list[tuple[str, tuple[str, ...], dict[str, str]]],
    work: Path,
    log_dir: Path,
    rounds: int,
    calls: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Start the model server and the contenders, warm each, measure, stop them."""
    root = work / "llm"
    root.mkdir()
    children = [start_model_server(ns, pki, root, log_dir)]
    try:
        all_cases = cases(variants)
        pids: dict[str, int] = {}
        for index, case in enumerate(all_cases):
            children.append(start_proxy(ns, case, index, ca, pki, root, log_dir))
            pids[case.name] = children[-1].pid
        ports = {case.name: PORT + index for index, case in enumerate(all_cases)}
        prefix = ns.exec_prefix(ns.client)

        def run(case: Case, count: int) -> tuple[float, list[float]]:
            argv = client_argv(prefix, f"http://127.0.0.1:{ports[case.name]}", str(ca.cert), count)
            before = procs.tree_cpu_seconds(pids[case.name])
            seconds = run_client(argv, REPO)
            time.sleep(SETTLE_S)
            return procs.tree_cpu_seconds(pids[case.name]) - before, seconds

        for case in all_cases:
            run(case, WARMUP_CALLS)
        section = measure(run, all_cases, rounds, calls, progress)
        metered = audited_calls(root / f"{LLM.replace(' ', '-')}-audit.log")
        expected = WARMUP_CALLS + rounds * calls
        if metered != expected:
            raise RuntimeError(f"llm: {metered} metered calls audited, expected {expected}")
        section["metered_calls"] = metered
        return section
    finally:
        for child in reversed(children):
            child.stop()


def paired(row: dict[str, Any], base: dict[str, Any]) -> list[float]:
    """Each round's CPU per call ÷ the base's in the same round (the two ran minutes
    apart at most: a drift of the machine's load between rounds cancels)."""
    return [a / b for a, b in zip(row["cpu_ms_rounds"], base["cpu_ms_rounds"], strict=True)]


def lines(section: dict[str, Any], grid: Any) -> list[str]:
    """CPU per call and p50 latency per contender, each ÷ `egress-proxy`'s (same run):
    the ratio of the medians, and the median (and range) of the rounds' ratios."""
    found = section["contenders"]
    base = found.get(BASE)
    header = ["contender", "CPU ms/call (range)", "÷ egress-proxy", "per round ÷ (range)"]
    header += ["p50 ms", "÷ egress-proxy"]
    rows = []
    for name, row in found.items():
        low, high = row["cpu_ms_range"]
        cpu_ratio = f"{row['cpu_ms_per_call'] / base['cpu_ms_per_call']:.2f}×" if base else ""
        # a results file of before the rounds were kept has no rounds' ratios
        ratios = paired(row, base) if base and "cpu_ms_rounds" in row else []
        by_round = (
            f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f})"
            if ratios
            else ""
        )
        p50_ratio = f"{row['p50_ms'] / base['p50_ms']:.2f}×" if base else ""
        rows.append(
            [
                name,
                f"{row['cpu_ms_per_call']:.2f} ({low:.2f}-{high:.2f})",
                cpu_ratio,
                by_round,
                f"{row['p50_ms']:.1f}",
                p50_ratio,
            ]
        )
    load = " ".join(f"{x:.1f}" for x in section["loadavg_before"])
    return [
        f"Scenario 13: a streamed openai chat call (OpenAI SDK, usage chunk) through the proxy, "
        f"without and with `llm:` ({section['calls']} calls a round, median of "
        f"{section['rounds']} rounds; proxy CPU user+system per call; load average before: "
        f"{load})",
        *grid(header, rows),
    ]
