"""End to end, what the proxy reports: audit lines (docs/configuration.md#audit-log) and Prometheus metrics (README.md#command-line),
checked against traffic this module sends itself."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.expect import Observed, assert_refused
from testbed.harness import AUDIT_KEYS, REASONS, Harness

pytestmark = pytest.mark.netns

CONFIGURED_RULES = {
    "api.allowed.test",
    "plain.allowed.test",
    "ports.allowed.test",
    "*.allowed.test",
    "*.wild.test",
    "internal.test",
    "rebind.test",
    "198.18.1.0/24",
    "budget.allowed.test",
}
# Host names and spellings the sandbox chose in these tests: never a metric label.
SANDBOX_CHOSEN = ["notlisted.test", "missing.allowed.test", "2130706433", "/metrics-path", "x.wild"]


def rules(harness: Harness) -> set[str]:
    return CONFIGURED_RULES | {harness.client_net}  # the proxy's own /30 is picked at run time


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(harness: Harness) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(harness.metrics_text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _labels), v in samples.items() if n == name)


def audit_line(harness: Harness, mark: int, **fields: Any) -> dict[str, Any]:
    def matches(line: dict[str, Any]) -> bool:
        return all(line.get(k) == v for k, v in fields.items())

    return harness.audit_log.wait_for(mark, matches)


def test_audit_lines_for_an_injected_request_and_two_refusals(harness: Harness, obs: Observed):
    mark = harness.audit_log.mark()
    body = b"x" * 5000
    allowed = harness.https(
        "api.allowed.test:443",
        "/audited",
        [("Content-Type", "text/plain")],
        method="POST",
        body=body,
    )
    assert allowed.status == 200, allowed.describe()
    assert obs.only_request()["body_len"] == 5000
    assert_refused(harness.plain("http://notlisted.test/audited"), "not_allowlisted")
    assert_refused(harness.connect("ports.allowed.test:443"), "port_not_allowed")

    injected = audit_line(
        harness, mark, method="POST", host="api.allowed.test", decision="allow", status=200
    )
    assert (injected["scheme"], injected["port"]) == ("https", 443), injected
    assert (injected["reason"], injected["rule"]) == ("allowlisted", "api.allowed.test"), injected
    assert sorted(n.lower() for n in injected["injected"]) == ["authorization", "x-api-key"]
    assert injected["client"].startswith(harness.client_ip), injected
    sizes = sorted([injected["bytes_sent"], injected["bytes_received"]])
    assert sizes[0] > 0, injected
    assert sizes[1] >= 5000, injected
    assert isinstance(injected["duration_s"], int | float)
    assert injected["duration_s"] >= 0

    plain = audit_line(harness, mark, host="notlisted.test", method="GET")
    assert (plain["scheme"], plain["port"], plain["decision"]) == ("http", 80, "deny"), plain
    assert (plain["reason"], plain["rule"], plain["injected"]) == ("not_allowlisted", None, [])
    assert plain["status"] == 403, plain

    connect = audit_line(harness, mark, host="ports.allowed.test", method="CONNECT")
    assert (connect["port"], connect["decision"], connect["reason"]) == (
        443,
        "deny",
        "port_not_allowed",
    ), connect
    assert (connect["status"], connect["injected"]) == (403, []), connect


def test_every_audit_line_is_complete_and_bounded(harness: Harness):
    # Some traffic of its own, so the test stands alone.
    harness.plain("http://other.allowed.test/complete")
    assert_refused(harness.plain("http://localhost/complete"), "loopback")

    lines = harness.audit_log.all()
    assert lines, "no audit line at all"
    for line in lines:
        assert set(line) >= AUDIT_KEYS, f"missing {AUDIT_KEYS - set(line)} in {line}"
        assert line["decision"] in ("allow", "deny"), line
        assert line["reason"] in REASONS, line
        assert (line["decision"] == "allow") == (line["reason"] == "allowlisted"), line
        assert line["rule"] is None or line["rule"] in rules(harness), line
        assert isinstance(line["injected"], list), line
        assert all(isinstance(n, str) for n in line["injected"]), line
        if line["decision"] == "deny":
            assert line["injected"] == [], line


def test_metrics_count_decisions_injections_and_durations(harness: Harness):
    before = scrape(harness)
    assert harness.https("api.allowed.test:443", "/metered").status == 200
    assert_refused(harness.plain("http://notlisted.test/metrics-path"), "not_allowlisted")
    assert_refused(harness.connect("2130706433:443"), "loopback")
    requests = "egress_requests_total"
    duration_count = "egress_request_duration_seconds_count"

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # A response may reach the client just before the proxy records it: poll briefly.
    deadline = time.monotonic() + 5
    while True:
        after = scrape(harness)
        settled = (
            delta(requests, decision="deny", reason="not_allowlisted") >= 1
            and delta(requests, decision="deny", reason="loopback") >= 1
            and total(after, duration_count) - total(before, duration_count) >= 1
        )
        if settled or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert delta(requests, decision="deny", reason="not_allowlisted") == 1
    assert delta(requests, decision="deny", reason="loopback") == 1
    assert delta(requests, decision="allow", reason="allowlisted") >= 1
    assert delta("egress_injections_total", rule="api.allowed.test") >= 1
    assert total(after, duration_count) - total(before, duration_count) >= 1
    buckets = [labels for (n, labels) in after if n == "egress_request_duration_seconds_bucket"]
    assert any(("le", "+Inf") in labels for labels in buckets), buckets
    # Every client above has closed its connection: the gauge comes back to exactly 0.
    while value(after, "egress_active_connections") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        after = scrape(harness)
    assert ("egress_active_connections", ()) in after
    assert after[("egress_active_connections", ())] == 0


def test_metric_labels_come_from_bounded_sets(harness: Harness):
    text = harness.metrics_text()
    for family in ("egress_requests_total", "egress_injections_total"):
        assert f"# HELP {family.removesuffix('_total')}" in text or f"# HELP {family}" in text
    for chosen in SANDBOX_CHOSEN:
        assert chosen not in text, f"sandbox-chosen {chosen!r} is in /metrics"
    for (name, labels), _v in scrape(harness).items():
        for key, label in labels:
            if key == "reason":
                assert label in REASONS, (name, labels)
            elif key == "decision":
                assert label in ("allow", "deny", "would_deny"), (name, labels)
            elif key == "rule":
                assert label in rules(harness), (name, labels)


def test_active_connections_gauge_counts_an_open_tunnel(harness: Harness):
    with harness.tunnel("other.allowed.test:443") as conn:
        response = harness.remember(conn.request("GET", "/held", [("Host", "other.allowed.test")]))
        assert response.status == 200, response.describe()
        assert value(scrape(harness), "egress_active_connections") >= 1


def test_healthz_answers_200(harness: Harness):
    assert harness.healthz() == 200
