"""The bench report's issue-26 figures and load line (bench/report.py), on a made-up run."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.targets import load_line, settled


def summary(cpu: float) -> dict[str, Any]:
    return {"summary": {"proxy_cpu_ms_per_req": {"median": cpu, "min": cpu, "max": cpu}}}


RESULTS: dict[str, Any] = {
    "machine": {"loadavg_at_start": ["0.20", "0.3", "0.4"], "loadavg_at_end": ["0.45", "0.3", "0.4"]},
    "throughput": {
        "workloads": {
            key: {"contenders": {"egress-proxy": summary(ours), "mitmdump": summary(bare),
                                 "squid": summary(squid)}}
            for key, ours, bare, squid in (
                ("http_keepalive", 0.8, 1.6, 0.1),
                ("https_keepalive", 1.0, 2.0, 0.1),
                ("https_new_conn", 4.0, 8.0, 0.8),
            )
        }
    },
    "memory": {
        "download": {"mib_per_s": 120.0, "direct_mib_per_s": 400.0},
        "upload": {"mib_per_s": 300.0, "direct_mib_per_s": 400.0},
    },
    "session": {
        "seconds": {
            "direct": {"git": 1.0, "pip": 1.0, "chat": 2.0, "download": 1.0, "total": 5.0},
            "egress-proxy": {"git": 1.2, "pip": 1.0, "chat": 4.0, "download": 4.0, "total": 10.2},
        }
    },
    "idle": {"proxies": {"egress-proxy": {"kib_per_connection": 80.0, "rss_before_kib": 70 * 1024}}},
    "latency": {
        "workloads": {
            "https_keepalive": {
                "contenders": {"egress-proxy": {"added_p50_ms": 1.25, "added_p99_ms": 6.5}}
            }
        }
    },
}  # fmt: skip


def _first_table(lines: list[str]) -> dict[str, list[str]]:
    rows = lines[3 : lines.index("")] if "" in lines else lines[3:]
    return {line.split("  ")[0]: line.split() for line in rows}


def test_each_figure_of_issue_26_against_its_target() -> None:
    table = _first_table(report.targets_lines(RESULTS))
    assert table["CPU per request (a) ÷ bare mitmdump"][-3:] == ["0.50", "≤", "0.6"]
    assert table["throughput per core (b) ÷ squid"][-3:] == ["0.100", "≥", "0.12"]
    assert table["throughput per core (c) ÷ squid"][-3:] == ["0.200", "≥", "0.25"]
    assert table["idle KiB per intercepted connection"][-3:] == ["80.0", "≤", "64"]
    assert table["idle process MiB (before the connections)"][-3:] == ["70.0", "≤", "60"]
    assert table["low load (b) added_p99_ms vs direct"][-3:] == ["6.50", "≤", "5"]


def test_each_figure_of_issue_36_against_its_target() -> None:
    table = _first_table(report.targets_lines(RESULTS))
    assert table["CPU ms per new TLS connection (c)"][-3:] == ["4.00", "≤", "4"]
    assert table["low load (b) added_p50_ms vs direct"][-3:] == ["1.25", "≤", "2"]
    assert table["bulk download MiB/s ÷ direct"][-3:] == ["0.30", "≥", "0.6"]
    assert table["bulk upload MiB/s ÷ direct"][-3:] == ["0.75", "≥", "0.6"]
    assert table["session chat ÷ direct"][-3:] == ["2.00", "≤", "1.5"]
    assert table["session pip ÷ direct"][-3:] == ["1.00", "≤", "1.5"]
    assert table["session total ÷ direct"][-3:] == ["2.04", "≤", "1.25"]


def test_issue_49s_table_has_a_column_per_contender_and_marks_what_is_met() -> None:
    results = {**RESULTS, "idle": {"proxies": {
        "egress-proxy": {"kib_per_connection": 80.0, "rss_before_kib": 1},
        "egress-proxy relay": {"kib_per_connection": 60.0, "rss_before_kib": 1},
        "squid": {"kib_per_connection": 62.0, "rss_before_kib": 1},
    }}}  # fmt: skip
    lines = report.targets_lines(results)
    start = lines.index("Issue 49's targets (this run; ✓ met)")
    header, table = (
        lines[start + 1],
        {line.split("  ")[0]: line for line in lines[start + 3 :] if line},
    )
    assert header.split("  ")[0] == "figure"
    assert [c.strip() for c in header.split("  ") if c.strip()] == [
        "figure", "target", "egress-proxy", "egress-proxy relay", "squid", "mitmdump"
    ]  # fmt: skip
    cells = lambda label: [c.strip() for c in table[label].split("  ") if c.strip()]  # noqa: E731
    assert cells("idle KiB per intercepted connection") == [
        "idle KiB per intercepted connection", "≤ 64", "80.00", "60.00 ✓", "62.00 ✓", "-"
    ]  # fmt: skip
    assert cells("kept-alive CPU (b) ÷ bare mitmdump") == [
        "kept-alive CPU (b) ÷ bare mitmdump", "≤ 0.5", "0.50 ✓", "-", "0.05 ✓", "1.00"
    ]  # fmt: skip
    assert cells("throughput per core (c) ÷ squid")[2:] == ["0.200", "-", "1.000 ✓", "0.100"]
    assert cells("session 300 chat calls ÷ direct")[2:] == ["2.00", "-", "-", "-"]
    assert cells("added p50 at low load (b), ms")[2:] == ["1.25 ✓", "-", "-", "-"]


def test_after_is_read_once_the_benchs_own_load_has_decayed() -> None:
    readings = iter([["1.4", "0.7", "0.5"], ["0.9", "0.7", "0.5"], ["0.42", "0.6", "0.5"]])
    slept: list[float] = []
    assert settled(lambda: next(readings), slept.append) == (["0.42", "0.6", "0.5"], 10.0)
    assert slept == [5.0, 5.0]
    busy = settled(lambda: ["2.0", "2.0", "2.0"], slept.append, limit=15)
    assert busy == (["2.0", "2.0", "2.0"], 15.0)
    machine = {
        "loadavg_at_start": ["0.27", "1.07", "2.91"],
        "loadavg_at_end": ["0.94", "0.65", "1.51"],
        "loadavg_settled": ["0.42", "0.6", "0.5"],
        "settle_seconds": 10.0,
    }
    assert load_line(machine) == (
        "load average (1, 5, 15 min): before 0.27 1.07 2.91, after 0.42 0.6 0.5 "
        "(at the end 0.94 0.65 1.51; read 10 s later): quiet"
    )
    assert load_line({**machine, "loadavg_settled": ["2.0", "2.0", "2.0"]}).endswith(
        "NOT quiet (>= 0.5)"
    )


def test_the_load_line_says_whether_the_run_was_quiet() -> None:
    assert load_line(RESULTS["machine"]).endswith(": quiet")
    loaded = {"loadavg_at_start": ["0.2"], "loadavg_at_end": ["3.1"]}
    assert "before 0.2, after 3.1: NOT quiet" in load_line(loaded)
    assert "NOT quiet" in load_line({"loadavg_at_start": ["0.1"]})


def test_a_run_without_those_scenarios_has_no_such_table() -> None:
    assert report.targets_lines({"machine": {}}) == []
