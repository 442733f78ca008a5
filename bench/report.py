"""The human-readable table of a results document (the JSON that `bench.run` writes).

Scenario 1 shows, per workload and contender, the median over the runs with the
range [min-max], and ratios of medians: throughput against direct, bare mitmproxy
and squid (higher is better), and proxy CPU per request against mitmproxy and
squid (lower is better). Numbers only; every figure comes from the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import boundary_call, claude_hook, llmcost, rules, sandboxes, session, targets
from bench.targets import load_line

BASELINES = ("direct", "mitmdump", "squid")


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _ranged(spread: dict[str, float] | None, digits: int = 1) -> str:
    if not spread:
        return "-"
    low, high = _num(spread["min"], digits), _num(spread["max"], digits)
    return f"{_num(spread['median'], digits)} [{low}-{high}]"


def _ratio(a: dict[str, float] | None, b: dict[str, float] | None) -> str:
    if not a or not b or not b["median"]:
        return "-"
    return f"{a['median'] / b['median']:.3f}"


Grid = Callable[[list[str], list[list[str]]], list[str]]


def text_grid(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [
        fmt.format(*r) for r in rows
    ]


def markdown_grid(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["", "| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return [*lines, ""]


def throughput_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    lines = [
        f"Scenario 1: {section['concurrency']} concurrent clients, {section['rounds']} runs of "
        f"{section['seconds']:g} s per contender and workload; median [min-max]",
    ]
    for workload in section["workloads"].values():
        contenders = workload["contenders"]
        summaries = {name: c["summary"] for name, c in contenders.items()}
        header = ["contender", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "util", "hey util"]
        header += [f"x {b}" for b in BASELINES] + ["CPU x mitmdump", "CPU x squid"]
        rows = []
        for name, s in summaries.items():
            invalid = s["runs"] - s["valid_runs"]
            label = name + (f" ({invalid} invalid runs)" if invalid else "")
            rows.append(
                [
                    label,
                    _ranged(s["rps"]),
                    _ranged(s["p50_ms"]),
                    _ranged(s["p99_ms"]),
                    _ranged(s["proxy_cpu_ms_per_req"], 2),
                    _num(s["proxy_util"]["median"], 2) if s["proxy_util"] else "-",
                    _num(s["client_util"]["median"], 2) if s["client_util"] else "-",
                    *(_ratio(s["rps"], summaries.get(b, {}).get("rps")) for b in BASELINES),
                    _ratio(
                        s["proxy_cpu_ms_per_req"],
                        summaries.get("mitmdump", {}).get("proxy_cpu_ms_per_req"),
                    ),
                    _ratio(
                        s["proxy_cpu_ms_per_req"],
                        summaries.get("squid", {}).get("proxy_cpu_ms_per_req"),
                    ),
                ]
            )
        lines += ["", workload["title"], *grid(header, rows)]
    return lines + h2_lines(section, grid)


def h2_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    """CPU per request with an HTTP/2 client leg against HTTP/1.1, same client (h2load)."""
    workloads = section["workloads"]
    if "h2load_h1" not in workloads or "h2load_h2" not in workloads:
        return []
    h1, h2 = workloads["h2load_h1"]["contenders"], workloads["h2load_h2"]["contenders"]
    header = ["contender", "h1 CPU ms/req", "h2 CPU ms/req", "h2 ÷ h1", "h1 req/s", "h2 req/s"]
    rows = []
    for name, c in h2.items():
        if name not in h1:
            continue
        a, b = h1[name]["summary"], c["summary"]
        rows.append(
            [
                name,
                _ranged(a["proxy_cpu_ms_per_req"], 2),
                _ranged(b["proxy_cpu_ms_per_req"], 2),
                _ratio(b["proxy_cpu_ms_per_req"], a["proxy_cpu_ms_per_req"]),
                _num(a["rps"]["median"]) if a["rps"] else "-",
                _num(b["rps"]["median"]) if b["rps"] else "-",
            ]
        )
    return ["", "HTTP/2 against HTTP/1.1 on the client leg ((e) against (d))", *grid(header, rows)]


def idle_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    proxies = section["proxies"]
    squid = proxies.get("squid", {}).get("kib_per_connection")
    header = ["proxy", "connections", "failures", "RSS before MiB", "RSS after MiB"]
    header += ["KiB per connection", "x squid", "open s"]
    rows = []
    for name, m in proxies.items():
        per = m["kib_per_connection"]
        rows.append(
            [
                name,
                str(m["connections"]),
                str(m["failures"]),
                _num(m["rss_before_kib"] / 1024),
                _num(m["rss_after_kib"] / 1024),
                _num(per),
                f"{per / squid:.2f}" if per is not None and squid else "-",
                _num(m["open_seconds"]),
            ]
        )
    return [
        f"Scenario 6: memory per idle intercepted connection ({section['count']} TLS tunnels "
        "per proxy, one GET each, then idle; RSS of the process tree)",
        *grid(header, rows),
    ]


def latency_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    lines = [
        f"Scenario 7: latency at low load (one client, {section['rate_per_s']:g} requests/s, "
        f"{section['requests']} requests, median of {section['rounds']} run(s))",
    ]
    for workload in section["workloads"].values():
        contenders = workload["contenders"]
        squid = contenders.get("squid", {})
        header = ["contender", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms"]
        header += ["added p50 x squid", "added p99 x squid"]
        rows = []
        for name, c in contenders.items():
            ratios = []
            for key in ("added_p50_ms", "added_p99_ms"):
                base = squid.get(key)
                ok = c[key] is not None and base
                ratios.append(f"{c[key] / base:.1f}" if ok and name != "direct" else "-")
            rows.append(
                [
                    name,
                    _num(c["p50_ms"], 2),
                    _num(c["p99_ms"], 2),
                    _num(c["added_p50_ms"], 2) if name != "direct" else "-",
                    _num(c["added_p99_ms"], 2) if name != "direct" else "-",
                    *ratios,
                ]
            )
        lines += ["", workload["title"], *grid(header, rows)]
    return lines


def decide_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    sizes = section["sizes"]
    header = ["operation", *(f"{n:,} entries" for n in sizes), f"x at {sizes[-1]:,}"]
    rows = []
    for name, points in section["operations"].items():
        cells = [f"{_num(p['ns'] / 1000, 2)} us" for p in points]
        rows.append([name, *cells, f"{points[-1]['ratio_to_10']:.2f}"])
    found = [
        f"Scenario 2: deciding a host (median of {section['rounds']} rounds; "
        "x = ratio to 10 entries)",
        *grid(header, rows),
    ]
    if "rules" in section:
        found += rules.lines(section["rules"], grid)
    return found


def memory_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    header = ["transfer", "VmHWM MiB", "RSS before MiB", "growth MiB", "MiB/s", "direct MiB/s"]
    header += ["proxy CPU s/GiB", "client CPU s/GiB", "direct client CPU s/GiB"]
    rows = []
    for label in ("download", "upload"):
        m = section[label]
        rows.append(
            [
                f"1 GiB {label}",
                _num(m["vm_hwm_kib"] / 1024),
                _num(m["rss_before_kib"] / 1024),
                _num((m["vm_hwm_kib"] - m["rss_before_kib"]) / 1024),
                _num(m["mib_per_s"]),
                _num(m["direct_mib_per_s"]),
                # a run from before issue 36 has no CPU figures
                *(
                    _num(m[key]) if key in m else "-"
                    for key in (
                        "proxy_cpu_s_per_gib",
                        "client_cpu_s_per_gib",
                        "direct_client_cpu_s_per_gib",
                    )
                ),
            ]
        )
    return [
        "Scenario 3: egress-proxy peak memory, 1 GiB through an intercepted tunnel",
        *grid(header, rows),
    ]


def hooks_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    if section.get("status") != "ok":
        return [f"Scenario 4: TODO - hook runner not measured: {section.get('reason', '?')}"]
    header = ["pair", "runner ms", "bare ms", "overhead ms"]
    rows = []
    labels = ["command_true", "command_echo_allow", "http_via_egress_proxy", "http_direct"]
    labels += ["claude_fire_cold", "claude_fire_warm"]
    for label in labels:
        if label not in section:  # a run from before the label existed
            continue
        pair = section[label]
        rows.append(
            [
                label,
                _ranged({k.removesuffix("_ms"): v for k, v in pair["runner"].items()}, 2),
                _ranged({k.removesuffix("_ms"): v for k, v in pair["bare"].items()}, 2),
                _num(pair["overhead_ms"], 2),
            ]
        )
    return [
        "Scenario 4: hook runner, one pre decision vs the same work done bare "
        f"({section['command_true']['calls']} calls each, median [min-max])",
        *grid(header, rows),
        f"  (the proxy's cost on the same POST: {_num(section['proxy_cost_ms'], 2)} ms)",
    ]


def profile_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    lines = ["Profiles (py-spy, share of CPU samples)"]
    for key, p in section.items():
        by_owner = ", ".join(f"{k} {v:.0%}" for k, v in p["self_by_owner"].items() if v >= 0.01)
        lines += [
            "",
            f"{key}: {p['samples']} samples (and {p.get('idle_samples', 0)} of waiting threads, "
            f"left out); under our code {p['under_ours']:.0%}; "
            f"getaddrinfo {p['getaddrinfo']:.0%}",
            f"  self time by owner: {by_owner}",
        ]
        lines.append("  self time, top functions:")
        lines += [f"  {t['share']:6.1%}  {t['function']}" for t in p["self_top"][:10]]
        if p["ours_inclusive_top"]:
            lines.append("  our functions, inclusive (with what they call):")
            lines += [f"  {t['share']:6.1%}  {t['function']}" for t in p["ours_inclusive_top"][:6]]
    return lines


def redact_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    header = ["body", "pass-through MB/s", "matcher MB/s", "matcher range MB/s", "x slower"]
    rows = []
    for case, m in section["body"].items():
        low, high = m["matcher_range_mb_s"]
        rows.append(
            [
                case,
                _num(m["pass_through_mb_s"], 0),
                _num(m["matcher_mb_s"], 0),
                f"{_num(low, 0)}-{_num(high, 0)}",
                f"{m['ratio']:.1f}",
            ]
        )
    return [
        f"Scenario 5: redacting echoed secrets ({section['body_bytes'] >> 20} MiB body in "
        f"{section['chunk_bytes'] >> 10} KiB chunks, secrets of {section['secret_bytes']} bytes; "
        f"median of {section['rounds']} rounds)",
        *grid(header, rows),
        f"one response header through Redactor.header: {_num(section['header_ns'], 0)} ns",
    ]


FAIRNESS_PHASES = (
    ("quiet", "nobody else"),
    ("dns_flood", "one client: {flood} lookups in flight of names that never answer"),
    ("dns_flood_shared_pool", "the same, 6 lookups at once and 6 per client (old pool size)"),
    ("half_open", "one client holds {held} half-sent request heads"),
)


def fairness_lines(section: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    header = ["phase", "while", "requests", "failures", "p50 ms", "p95 ms", "max ms"]
    rows = []
    for key, text in FAIRNESS_PHASES:
        m = section.get(key)
        if m is None:
            continue
        rows.append(
            [key, text.format(**section), str(m["requests"]), str(m["failures"])]
            + [_num(m[k]) if m[k] is not None else "-" for k in ("p50_ms", "p95_ms", "max_ms")]
        )
    return [
        "Scenario 8: another client's latency while one client misbehaves (egress-proxy at a "
        "256-descriptor limit; a GET of an /etc/hosts name, one at a time)",
        *grid(header, rows),
    ]


def targets_lines(results: dict[str, Any], grid: Grid = text_grid) -> list[str]:
    found = targets.rows(results)
    if not found:
        return []
    header = ["figure", "value", "target"]
    lines = ["Issues 26's and 36's figures (egress-proxy, this run)", *grid(header, found)]
    columns, issue_49 = targets.issue_49(results)
    if issue_49:
        lines += ["", "Issue 49's targets (this run; ✓ met)", *grid(columns, issue_49)]
    return lines


def render(results: dict[str, Any], grid: Grid = text_grid) -> str:
    machine = results["machine"]
    lines = [
        f"sandbox-egress benchmark {results['started']}",
        f"machine: {machine['cpus']} x {machine['cpu_model']}, {machine['memory_gib']:.0f} GiB",
        load_line(machine),
        "versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()),
        f"code: {results['code']['commit'][:12]}"
        + (" + uncommitted changes" if results["code"]["uncommitted"] else "")
        + f" (proxy/ + addons/ digest {results['code']['proxy_addons_sha256']})",
        "",
    ]
    for key, render_section in (
        ("throughput", throughput_lines),
        ("decide", decide_lines),
        ("memory", memory_lines),
        ("hooks", hooks_lines),
        ("idle", idle_lines),
        ("latency", latency_lines),
        ("redact", redact_lines),
        ("sandboxes", sandboxes.lines),
        ("fairness", fairness_lines),
        ("session", session.lines),
        ("claudehook", claude_hook.lines),
        ("boundary", boundary_call.lines),
        ("llm", llmcost.lines),
        ("profile", profile_lines),
    ):
        if results.get(key):
            lines += [*render_section(results[key], grid), ""]
    lines += [*targets_lines(results, grid), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report RESULTS.json [--markdown]`: render a results file again."""
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--markdown", action="store_true", help="tables for docs/benchmarks.md")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    print(render(results, markdown_grid if args.markdown else text_grid))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
