"""Metrics: closed label sets, a registry per instance, the metrics address parser."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sandbox_egress.hookrunner.ax.metrics import possible_outcomes as ax_possible_outcomes
from sandbox_egress.hookrunner.ax.model import AxEvent
from sandbox_egress.hookrunner.metrics import HookMetrics, possible_outcomes
from sandbox_egress.hookrunner.model import Event
from sandbox_egress.hookrunner.outcome import HandlerType, Outcome

FAILURES_BY_TYPE = {
    HandlerType.COMMAND: {"exit_nonzero", "not_found", "not_executable", "crashed", "spawn_error"},
    HandlerType.HTTP: {
        "http_error",
        "network_error",
        "tls_error",
        "proxy_refused",
        "proxy_unusable",
    },
}
PRE = {"allow", "deny", "empty_output", "unrecognised", "unparseable", "near_miss", "truncated"}


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("kind", list(HandlerType))
def test_every_possible_series_starts_at_zero(event: Event, kind: HandlerType) -> None:
    metrics = HookMetrics()
    own = PRE if event is Event.PRE else {"ok"}
    expected = own | {"timeout"} | FAILURES_BY_TYPE[kind]
    assert {o.value for o in possible_outcomes(event, kind)} == expected
    for outcome in expected:
        labels = {"event": event.value, "type": kind.value, "outcome": outcome}
        assert metrics.registry.get_sample_value("hook_runs_total", labels) == 0.0


def test_every_outcome_is_possible_somewhere() -> None:
    """The one outcome set of both dialects holds no value that no hook can have."""
    seen = {o for e in Event for k in HandlerType for o in possible_outcomes(e, k)}
    seen |= {o for e in AxEvent for o in ax_possible_outcomes(e)}
    assert seen == set(Outcome)


def test_instances_do_not_share_a_registry() -> None:
    a, b = HookMetrics(), HookMetrics()
    a.observe_warning("config")
    assert (
        a.value("hook_warnings_total", kind="config"),
        b.value("hook_warnings_total", kind="config"),
    ) == (1.0, 0.0)


def test_a_given_registry_is_used_and_help_text_is_present() -> None:
    registry = CollectorRegistry()
    HookMetrics(registry)
    text = generate_latest(registry).decode()
    for name in (
        "hook_runs_total",
        "hook_duration_seconds",
        "hook_warnings_total",
        "hook_decisions_total",
    ):
        assert f"# HELP {name.removesuffix('_total')}" in text or f"# HELP {name}" in text
