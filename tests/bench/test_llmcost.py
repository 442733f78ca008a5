"""Scenario 13 (bench/llmcost.py): the llm contender's node file is a valid `llm:` entry
whose budgets no run reaches; rounds rotate and give medians and ratios in the same run;
and a tiny live run (real proxies, model server and OpenAI SDK client in namespaces)
meters every call through the llm contender only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bench import allowlist, llmcost, netns, pki
from bench.contenders import VENV_BIN
from bench.report import text_grid
from sandbox_egress.proxy.config.loader import load
from sandbox_egress.proxy.llm.config import parse_llm


def test_the_two_node_files_differ_only_by_the_llm_clause(tmp_path: Path) -> None:
    plain, metered = llmcost.node_document(False), llmcost.node_document(True)
    entry = metered["network"]["allowlist"][1]
    assert {k: v for k, v in entry.items() if k != "llm"} == plain["network"]["allowlist"][1]
    problems: list[tuple[str, str]] = []
    ok, clause = parse_llm(entry["llm"], "llm", lambda w, m: problems.append((w, m)))
    assert ok and clause is not None and problems == []
    assert clause.tokens is not None and clause.tokens.amount >= 10**9  # never refuses
    assert clause.glob_of("gpt-5-mini") == "gpt-5*" and clause.max_output_tokens == 1000
    for name, document in (("plain", plain), ("llm", metered)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document))
        assert [e.pattern for e in load(path, {}).allowlist][-1] == allowlist.CHAT_HOST


def test_rounds_rotate_the_contenders_and_report_medians_and_ratios() -> None:
    cases = llmcost.cases([("egress-proxy before", (), {"PYTHONPATH": "/old"})])
    assert [(c.name, c.llm, c.env) for c in cases] == [
        ("egress-proxy", False, ()),
        ("egress-proxy llm", True, ()),
        ("egress-proxy before", False, (("PYTHONPATH", "/old"),)),
    ]
    order: list[str] = []
    cpu = {"egress-proxy": [0.2, 0.4, 0.3], "egress-proxy llm": [0.5, 0.6, 0.7]}
    cpu["egress-proxy before"] = [0.3, 0.3, 0.3]

    def run(case: llmcost.Case, calls: int) -> tuple[float, list[float]]:
        order.append(case.name)
        return cpu[case.name][order.count(case.name) - 1], [0.01 * calls] * calls

    section = llmcost.measure(run, cases, 3, 100, lambda _: None)
    names = [c.name for c in cases]
    assert order == names + names[1:] + names[:1] + names[2:] + names[:2]
    found = section["contenders"]
    assert found["egress-proxy"]["cpu_ms_per_call"] == pytest.approx(3.0)  # 0.3 s / 100
    assert found["egress-proxy llm"]["cpu_ms_range"] == pytest.approx([5.0, 7.0])
    assert found["egress-proxy"]["p50_ms"] == pytest.approx(1000.0)
    table = "\n".join(llmcost.lines(section, text_grid))
    assert "2.00×" in table and "1.00×" in table  # llm 6.0 ÷ 3.0; before 3.0 ÷ 3.0
    # round by round: llm 5/2, 6/4, 7/3 (median 2.33); before 3/2, 3/4, 3/3 (median 1.00)
    llm_row = next(line for line in table.splitlines() if line.startswith("egress-proxy llm"))
    assert "2.33× (1.50-2.50)" in llm_row
    before = next(line for line in table.splitlines() if line.startswith("egress-proxy before"))
    assert "1.00× (0.75-1.50)" in before


@pytest.mark.netns
def test_a_tiny_live_run_meters_every_call_of_the_llm_contender_only(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    logs = tmp_path / "logs"
    logs.mkdir()
    ns = netns.Namespaces(f"tl{os.getpid() % 100000}")
    try:
        ns.build({allowlist.CHAT_HOST: netns.UPSTREAM_IP})
        upstream = pki.make_upstream_pki(tmp_path, [allowlist.CHAT_HOST])
        ca = pki.make_proxy_ca(VENV_BIN / "egress-proxy", tmp_path / "ca")
        section = llmcost.measure_live(ns, ca, upstream, [], tmp_path, logs, 1, 4, print)
    finally:
        assert ns.close() == []
    assert section["metered_calls"] == llmcost.WARMUP_CALLS + 4
    assert set(section["contenders"]) == {"egress-proxy", "egress-proxy llm"}
    assert all(c["p50_ms"] > 0 for c in section["contenders"].values())
    plain_audit = (tmp_path / "llm" / "egress-proxy-audit.log").read_text()
    assert '"llm_model"' not in plain_audit and plain_audit.count("\n") >= 4
