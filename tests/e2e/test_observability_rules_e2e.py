"""The alert rules and the dashboard against what a real run exposes (issue 14).

`deploy/prometheus/egress-alerts.yaml` is checked by `promtool check rules` and tested by
`promtool test rules` (Debian's `prometheus` package) on input series whose names and
label sets are taken from a scrape of the real proxy after real traffic (and from the hook
runner's own registry); every query of `deploy/grafana/egress-dashboard.json` and of the
rules must name a metric that exists.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sandbox_egress.hookrunner.ax import metrics as ax_metrics
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.outcome import FAILURES, Outcome
from sandbox_egress.hookrunner.report import WarningKind
from testbed.harness import Harness

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "egress-alerts.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "egress-dashboard.json"
TARGET = {"job": "egress-proxy", "instance": "proxy:9464"}
HOOK_TARGET = {"job": "hookrunner", "instance": "sandbox:9465"}
_METRIC = re.compile(r"\b((?:egress|hook)_[a-z_]+|up)\b")

Series = dict[str, set[frozenset[tuple[str, str]]]]  # name -> label sets


def promtool() -> str:
    path = shutil.which("promtool")
    assert path is not None, "needs promtool (Debian's prometheus; scripts/install-test-deps)"
    return path


def parse(text: str) -> Series:
    found: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(frozenset(sample.labels.items()))
    return found


@pytest.fixture(scope="module")
def real(harness: Harness) -> Series:
    """Series names and label sets of the real proxy after an allow and a refusal, plus
    those of the hook runner's registry (its label sets are pre-registered)."""
    assert harness.https("api.allowed.test:443", "/rules-probe").status == 200
    assert harness.connect("notlisted.test:443").status == 403
    series = parse(harness.metrics_text())
    hook_metrics = HookMetrics()
    hook_metrics.use(ax_metrics.register)  # the series the command line registers (both dialects)
    hook_metrics.observe_warning(WarningKind.FAIL_OPEN)  # warnings have no label set until then
    hooks = parse(generate_latest(hook_metrics.registry).decode())
    return {**series, **hooks, "up": {frozenset()}}


def series_line(name: str, labels: dict[str, str], target: dict[str, str]) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **target}.items()))
    return f"{name}{{{body}}}"


def used(real: Series, name: str, **labels: str) -> dict[str, str]:
    """A label set the real run exposes for `name` (the test only uses real series)."""
    assert frozenset(labels.items()) in real.get(name, set()), (name, labels, real.get(name))
    return labels


def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 11 rules found" in result.stdout


def expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return exprs


def test_every_query_names_a_metric_that_exists(real: Series) -> None:
    names = {m for expr in expressions() for m in _METRIC.findall(expr)}
    assert names, "no metric found in the queries"
    missing = sorted(n for n in names if n not in real)
    assert missing == []


def test_the_fail_open_pattern_is_every_outcome_that_is_not_a_failure() -> None:
    ok = {o.value for o in Outcome if o not in FAILURES}
    for expr in expressions():
        for pattern in re.findall(r'outcome!~"([^"]+)"', expr):
            assert set(pattern.split("|")) == ok


def annotations(alert: str, **values: str) -> dict[str, str]:
    """The rule's annotations with its `{{ $labels.x }}` / `{{ $value }}` filled in."""
    rules = yaml.safe_load(RULES.read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert)
    return {
        key: re.sub(r"\{\{ \$(?:labels\.)?(\w+) \}\}", lambda m: values[m[1]], text)
        for key, text in rule["annotations"].items()
    }


def test_alerts_fire_on_series_from_a_real_run(real: Series, tmp_path: Path) -> None:
    errors = used(real, "egress_policy_errors_total", stage="request")
    failed = used(real, "egress_config_reloads_total", result="failed")
    reloaded = used(real, "egress_config_reloads_total", result="ok")
    denied = used(real, "egress_requests_total", decision="deny", reason="not_allowlisted")
    allowed = used(real, "egress_requests_total", decision="allow", reason="allowlisted")
    dropped = used(real, "egress_audit_lines_dropped_total")
    client_tls = used(real, "egress_client_tls_failures_total")
    entries = used(real, "egress_allowlist_entries")
    budget = used(real, "egress_budget_exceeded_total", rule="budget.allowed.test",
                  budget="upload")  # fmt: skip
    timeout = used(real, "hook_runs_total", event="pre_tool_execution", type="command",
                   outcome="timeout")  # fmt: skip
    deny = used(real, "hook_runs_total", event="pre_tool_execution", type="command",
                outcome="deny")  # fmt: skip
    p, h = TARGET, HOOK_TARGET
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": series_line("egress_policy_errors_total", errors, p),
                 "values": "0 0 0 1 1 1 1 1"},
                {"series": series_line("egress_config_reloads_total", failed, p),
                 "values": "0 0 1 1 1 1 1 1"},
                {"series": series_line("egress_config_reloads_total", reloaded, p),
                 "values": "0 1 2 3 4 5 6 7"},
                {"series": series_line("egress_audit_lines_dropped_total", dropped, p),
                 "values": "0x7"},
                {"series": series_line("egress_allowlist_entries", entries, p), "values": "9x7"},
                # A sandbox that does not trust the CA: 3 failed handshakes a minute.
                {"series": series_line("egress_client_tls_failures_total", client_tls, p),
                 "values": "0+3x7"},
                # 60 refusals and 6 allows a minute: a sandbox probing.
                {"series": series_line("egress_requests_total", denied, p),
                 "values": "0+60x30"},
                {"series": series_line("egress_requests_total", allowed, p),
                 "values": "0+6x30"},
                {"series": series_line("hook_runs_total", timeout, h), "values": "0 0 2 2 2 2 2 2"},
                {"series": series_line("hook_runs_total", deny, h), "values": "0 5 10 15 20 25"},
                # An entry's upload budget hit twice, then nothing more.
                {"series": series_line("egress_budget_exceeded_total", budget, p),
                 "values": "0 0 1 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"},
                {"series": series_line("up", {}, p), "values": "1 1 0 0 0 0 0 0"},
                {"series": series_line("up", {}, h), "values": "1x7"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "EgressPolicyErrors",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", "stage": "request", **p},
                                 "exp_annotations": annotations("EgressPolicyErrors", value="1",
                                                                stage="request")}]},
                {"eval_time": "5m", "alertname": "EgressConfigReloadFailed",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", "result": "failed", **p},
                                 "exp_annotations": annotations("EgressConfigReloadFailed")}]},
                {"eval_time": "5m", "alertname": "EgressAuditLinesDropped", "exp_alerts": []},
                {"eval_time": "1m", "alertname": "EgressClientTlsFailures", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "EgressClientTlsFailures",
                 "exp_alerts": [{"exp_labels": {"severity": "warning",
                                                "instance": p["instance"]},
                                 "exp_annotations": annotations("EgressClientTlsFailures",
                                                                value="15")}]},
                {"eval_time": "7m", "alertname": "EgressEmptyAllowlist", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "EgressProxyDown",
                 "exp_alerts": [{"exp_labels": {"severity": "critical", **p},
                                 "exp_annotations": annotations("EgressProxyDown", **p)}]},
                {"eval_time": "5m", "alertname": "HookRunnerDown", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "EgressBudgetExhausted",
                 "exp_alerts": [{"exp_labels": {"severity": "warning", **budget, **p},
                                 "exp_annotations": annotations(
                                     "EgressBudgetExhausted", value="2", **budget)}]},
                {"eval_time": "19m", "alertname": "EgressBudgetExhausted", "exp_alerts": []},
                {"eval_time": "25m", "alertname": "EgressDenialRatioHigh",
                 "exp_alerts": [{"exp_labels": {"severity": "warning",
                                                "instance": p["instance"]},
                                 "exp_annotations": annotations("EgressDenialRatioHigh", **p)}]},
                {"eval_time": "5m", "alertname": "HookFailingOpen",
                 "exp_alerts": [{"exp_labels": {
                     "severity": "warning", "instance": h["instance"],
                     "event": "pre_tool_execution", "outcome": "timeout"},
                     "exp_annotations": annotations(
                         "HookFailingOpen", event="pre_tool_execution", outcome="timeout",
                         value="2")}]},
            ],
        }],
    }  # fmt: skip
    path = tmp_path / "alerts-test.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
