"""`python -m bench`: set everything up, run the scenarios, tear everything down, report.

Order: the pure microbenchmarks (scenarios 2 and 5, which alone need neither root
nor the system tools) first, on a quiet machine; then the
namespaces, certificates, upstreams and the three proxies; a probe of each; the
load (scenario 1), the 1 GiB transfers (3), the hook runner (4), 1,000 idle
tunnels (6), the latency at low load (7) and, with
`--profile`, the py-spy profiles. Everything started is stopped by pid and the
namespaces are deleted in a `finally`, also after a failure, Ctrl-C or SIGTERM.
Results go to bench-results/<UTC timestamp>.json; the table to stdout. On a
failure the children's logs are kept in bench-results/<timestamp>-logs/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import (
    allowlist,
    boundary_call,
    budget_state,
    claude_hook,
    contenders,
    decide,
    fairness,
    hooks,
    idle,
    latency,
    llmcost,
    memory,
    netns,
    probe,
    procs,
    profile,
    redact,
    report,
    rules,
    sandboxes,
    session,
    targets,
    throughput,
    upstream,
)

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = (
    "throughput",
    "decide",
    "memory",
    "hooks",
    "redact",
    "idle",
    "latency",
    "sandboxes",
    "fairness",
    "session",
    "claudehook",
    "boundary",
    "llm",
)
PURE = frozenset(
    {"decide", "redact", "sandboxes", "claudehook", "boundary"}
)  # no network (but loopback), no root
OWN_NETWORK = frozenset({"fairness"})  # namespaces of its own: root and `ip` only
REQUIRED = ("ip", "hey", "h2load", "socat", "nginx", "squid", str(contenders.CERTGEN))
_ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=")


def _say(text: str) -> None:
    print(text, flush=True)


def machine() -> dict[str, Any]:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": mem_kib / (1 << 20),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_config": _python_config(),
        "loadavg_at_start": _loadavg(),
    }


def _python_config() -> str:
    import sysconfig

    args = str(sysconfig.get_config_var("CONFIG_ARGS") or "")
    flags = [f for f in ("--enable-optimizations", "--with-lto", "--enable-shared") if f in args]
    return " ".join(flags) or "no PGO/LTO"


def _first_line(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (
        (done.stdout or done.stderr).strip().splitlines()[0]
        if (done.stdout or done.stderr)
        else "?"
    )


def versions() -> dict[str, str]:
    from cryptography.hazmat.backends.openssl import backend

    return {
        "mitmproxy": importlib.metadata.version("mitmproxy"),
        "mitmproxy OpenSSL": backend.openssl_version_text(),
        "squid": _first_line(["squid", "-v"]).removeprefix("Squid Cache: Version "),
        "nginx": _first_line(["nginx", "-v"]).removeprefix("nginx version: nginx/"),
        "hey": _first_line(["dpkg-query", "-W", "-f=${Version}", "hey"]),
    }


def code_state() -> dict[str, Any]:
    """Which code was measured: the commit, uncommitted changes, a digest of proxy/ + addons/."""
    digest = hashlib.sha256()
    for path in sorted([*REPO.glob("proxy/*.py"), *REPO.glob("addons/*.py")]):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    commit = _first_line(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    status = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "proxy", "addons", "hookrunner"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return {
        "commit": commit,
        "uncommitted": [line[3:] for line in status.splitlines()],
        "proxy_addons_sha256": digest.hexdigest()[:16],
    }


def _loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


# The egress-proxy engine of before the lean master (issue 12), measured beside it.
TODAY = "mitmdump-engine"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per contender and workload")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one run")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up run length")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {SCENARIOS}"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help='another egress-proxy contender with extra arguments, e.g. "w2=--workers 2" '
        '(leading VAR=value words are its environment: "debug-checks=PYTHONOPTIMIZE=0"); '
        f'"{TODAY}" (the engine of today) is always measured unless --no-today',
    )
    parser.add_argument(
        "--no-today",
        action="store_true",
        help=f"skip the {TODAY} variant (egress-proxy on mitmproxy's full addon chain)",
    )
    parser.add_argument(
        "--idle-connections", type=int, default=1000, help="idle tunnels per proxy (scenario 6)"
    )
    parser.add_argument(
        "--latency-requests", type=int, default=1000, help="requests per low-load run (7)"
    )
    parser.add_argument("--latency-rounds", type=int, default=1, help="low-load runs (7)")
    parser.add_argument(
        "--fairness-requests", type=int, default=20, help="the other client's requests (8)"
    )
    parser.add_argument(
        "--session-rounds", type=int, default=1, help="replayed sessions per contender (10)"
    )
    parser.add_argument(
        "--llm-calls", type=int, default=200, help="streamed chat calls per round (13)"
    )
    parser.add_argument("--profile", action="store_true", help="also profile with py-spy")
    parser.add_argument("--profile-seconds", type=float, default=8.0)
    parser.add_argument("--output", type=Path, default=REPO / "bench-results")
    return parser


Variant = tuple[str, tuple[str, ...], dict[str, str]]


def _variants(specs: list[str], today: bool = True) -> list[Variant]:
    found: list[Variant] = (
        [(f"egress-proxy {TODAY}", ("--engine", "mitmdump"), {})] if today else []
    )
    for spec in specs:
        name, sep, extra = spec.partition("=")
        if not sep or not name.strip() or name.strip() in contenders.PORTS:
            raise SystemExit(f"bench: --variant wants NAME=ARGS with a new name, got {spec!r}")
        words, env = shlex.split(extra), {}
        while words and _ENV_WORD.match(words[0]):
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        found.append((f"egress-proxy {name.strip()}", tuple(words), env))
    return found


def _preflight() -> str | None:
    if os.geteuid() != 0:
        return "needs root (it builds network namespaces)"
    missing = [tool for tool in REQUIRED if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)}: run bench/install-deps (make bench does)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    wanted = {s.strip() for s in args.only.split(",") if s.strip()}
    if unknown := wanted - set(SCENARIOS):
        _say(f"bench: unknown scenario(s) {sorted(unknown)}")
        return 2
    if (wanted - PURE - OWN_NETWORK or args.profile) and (problem := _preflight()):
        _say(f"bench: {problem}")
        return 2
    if wanted & OWN_NETWORK and os.geteuid() != 0:
        _say("bench: fairness needs root (it builds network namespaces)")
        return 2

    def interrupted(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    started = dt.datetime.now(dt.UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    args.output.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "code": code_state(),
        "settings": {k: str(v) for k, v in vars(args).items()},
    }
    _say(
        f"load average at start (1, 5, 15 min): {' '.join(results['machine']['loadavg_at_start'])}"
    )
    if "decide" in wanted:
        _say("scenario 2: deciding a host as the allowlist grows")
        results["decide"] = decide.measure()
        results["decide"]["rules"] = rules.measure()
        results["decide"]["budget_state"] = budget_state.measure()  # issue 34: per backend
    if "redact" in wanted:
        _say("scenario 5: redacting echoed secrets (streaming body matcher, headers)")
        results["redact"] = redact.measure()
    if "sandboxes" in wanted:
        _say("scenario 8: a node proxy serving 1,000 sandbox files")
        results["sandboxes"] = sandboxes.measure()
    if "claudehook" in wanted:
        _say("scenario 11: a Claude Code hook call through `hookrunner claude install`")
        results["claudehook"] = claude_hook.measure()
    if "boundary" in wanted:
        _say("scenario 12: a Bash call under the runner's boundary (fire's updatedInput)")
        results["boundary"] = boundary_call.measure()
    if "fairness" in wanted:
        _say("scenario 9: another client's latency while one client misbehaves")
        results["fairness"] = fairness.measure(args.fairness_requests, progress=_say)
    network = {"throughput", "memory", "idle", "latency", "hooks", "session", "llm"}
    if wanted & network or args.profile:
        ok = False
        work = Path(tempfile.mkdtemp(prefix="egress-bench-"))
        try:
            _network_scenarios(args, wanted, work, results, args.output / f"{stamp}-profiles")
            ok = True
        finally:
            if not ok and (work / "logs").exists():
                kept = args.output / f"{stamp}-logs"
                shutil.copytree(work / "logs", kept, dirs_exist_ok=True)
                _say(f"bench: failed; logs kept in {kept}")
            shutil.rmtree(work, ignore_errors=True)
    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    results["machine"]["loadavg_at_end"] = _loadavg()
    _say(f"waiting up to {targets.SETTLE_SECONDS} s for the bench's own load to decay")
    after, waited = targets.settled(_loadavg, time.sleep)
    results["machine"]["loadavg_settled"], results["machine"]["settle_seconds"] = after, waited
    _say(targets.load_line(results["machine"]))
    path = args.output / f"{stamp}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    _say("\n" + report.render(results))
    _say(f"results: {path}")
    return 0


def _network_scenarios(
    args: argparse.Namespace,
    wanted: set[str],
    work: Path,
    results: dict[str, Any],
    profiles: Path,
) -> None:
    work.chmod(0o755)  # nginx workers and squid (unprivileged) read below it
    logs = work / "logs"
    logs.mkdir()
    ns = netns.Namespaces(f"eb{os.getpid() % 100000}")
    children: list[procs.Child] = []
    try:
        _say(f"setting up: namespaces {ns.client}/{ns.upstream}, upstreams, the three proxies")
        stage = contenders.build_stage(ns, work, logs)
        policy, upstream_pki, ca = stage.policy, stage.upstream_pki, stage.ca
        children += [stage.servers.nginx, stage.servers.sink]
        mitmdump = contenders.start_mitmdump(ns, ca, upstream_pki, work, logs)
        children.append(mitmdump.child)
        squid = contenders.start_squid(ns, ca, upstream_pki, policy, work, logs)
        children.append(squid.child)
        egress = contenders.start_egress(ns, ca, upstream_pki, policy, work, logs)
        children.append(egress.child)
        proxies = [mitmdump, squid, egress]
        variants = _variants(args.variant, not args.no_today)
        for offset, (name, extra, env) in enumerate(variants, start=1):
            variant = contenders.start_egress(
                ns, ca, upstream_pki, policy, work, logs, name, extra, offset, env
            )
            children.append(variant.child)
            proxies.append(variant)

        results["allowlist"] = {
            "entries": len(policy),
            "transforms": sum(1 for r in policy.rules if r.token_env),
            "wildcards": sum(1 for r in policy.rules if r.pattern.startswith("*.")),
            "host_under_test": allowlist.TARGET,
        }
        results["probe"] = {}
        for name, port in [("direct", None), *((p.name, p.port) for p in proxies)]:
            found = probe.probe(ns.client, name, port, str(ca.cert), str(upstream_pki.ca_cert))
            probe.check(found)
            results["probe"][name] = found.as_dict()
        _say(f"probe: {results['probe']}")

        prefix = ns.exec_prefix(ns.client)
        tunnels: dict[str, str] = {}
        if "throughput" in wanted:
            authority = f"{allowlist.TARGET}:{upstream.HTTPS_PORT}"
            for index, p in enumerate(proxies):
                forwarder, tunnels[p.name] = contenders.start_forwarder(
                    ns, p, index, authority, logs
                )
                children.append(forwarder)
        targets = [throughput.Target("direct", None, None, http2=True)] + [
            throughput.Target(
                p.name, p.proxy_url, p.child.pid, tunnels.get(p.name), p.name != "squid"
            )
            for p in proxies
        ]
        if "throughput" in wanted:
            _say("scenario 1: throughput, latency, CPU per request")
            results["throughput"] = throughput.measure(
                prefix,
                targets,
                rounds=args.rounds,
                seconds=args.seconds,
                warmup_seconds=args.warmup,
                concurrency=args.concurrency,
                log_dir=logs,
                progress=_say,
            )
        if "memory" in wanted:
            _say("scenario 3: peak memory, 1 GiB each way through egress-proxy")
            results["memory"] = memory.measure(
                ns.client,
                egress.child.pid,
                egress.port,
                str(ca.cert),
                str(upstream_pki.ca_cert),
            )
        if "idle" in wanted:
            _say(f"scenario 6: memory per idle connection ({args.idle_connections} per proxy)")
            results["idle"] = idle.measure(
                ns.client,
                [(p.name, p.child.pid, p.port) for p in proxies],
                str(ca.cert),
                args.idle_connections,
            )
        if "latency" in wanted:
            _say("scenario 7: latency at low load (one client, a request per 50 ms)")
            results["latency"] = latency.measure(
                prefix,
                targets,
                requests=args.latency_requests,
                rounds=args.latency_rounds,
                log_dir=logs,
                progress=_say,
            )
        if "session" in wanted:
            _say("scenario 10: a replayed agent session (git, pip, chat, 1 GiB)")
            cache = session.prepare(args.output / ".session-cache")
            children += session.start_servers(
                ns, upstream_pki.server_cert, upstream_pki.server_key, cache, work, logs
            )
            replayed: list[tuple[str, str | None, str]] = [
                ("direct", None, str(upstream_pki.ca_cert))
            ]
            # The variants too (`--variant`): a change measured against its own before.
            replayed += [(p.name, p.proxy_url, str(ca.cert)) for p in proxies]
            results["session"] = session.measure(
                prefix, replayed, work / "session-client", REPO, args.session_rounds, _say
            )
        if "llm" in wanted:
            _say("scenario 13: a streamed chat call through the proxy, without and with `llm:`")
            results["llm"] = llmcost.measure_live(
                ns, ca, upstream_pki, variants, work, logs, args.rounds, args.llm_calls, _say
            )
        if "hooks" in wanted:
            _say("scenario 4: hook runner overhead")
            results["hooks"] = _hooks(prefix, egress, ca.cert, upstream_pki.ca_cert)
        if args.profile:
            results["profile"] = _profiles(args, prefix, targets, profiles)
    finally:
        for child in reversed(children):
            child.stop()
        failures = ns.close()
        if failures:
            _say("bench: cleanup problems: " + "; ".join(failures))


def _hooks(
    prefix: list[str], egress: contenders.Contender, proxy_ca: Path, upstream_ca: Path
) -> dict[str, Any]:
    argv = [*prefix, sys.executable, "-m", "bench.hooks", "--proxy", egress.proxy_url]
    argv += ["--proxy-ca", str(proxy_ca), "--upstream-ca", str(upstream_ca)]
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"status": "todo", "reason": f"{hooks.__name__} did not answer: {exc!r}"}


def _profiles(
    args: argparse.Namespace, prefix: list[str], targets: list[throughput.Target], keep: Path
) -> dict[str, Any]:
    _say("profiling with py-spy")
    py_spy = profile.ensure_py_spy(args.output / ".tools")
    found: dict[str, Any] = {}
    keep.mkdir(exist_ok=True)
    for target in targets:
        if target.name not in ("egress-proxy", "mitmdump"):
            continue
        for workload in throughput.HEY_WORKLOADS[1:]:
            key = f"{target.name} {workload.key}"
            _say(f"  {key}")
            found[key] = profile.profile(
                prefix, py_spy, target, workload, args.profile_seconds, args.concurrency, keep
            )
    return found
