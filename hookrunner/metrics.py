"""The hook runner's Prometheus metrics, in one place.

* ``hook_runs_total{event,type,outcome}``: one per handler run; ``outcome`` is
  ``model.Outcome`` (a closed set), so fail-open causes are counted apart;
* ``hook_duration_seconds{event,type}``: how long each handler run took;
* ``hook_warnings_total{kind}``: every warning line (``report.WarningKind``);
* ``hook_decisions_total{decision}``: the aggregated pre_tool_execution verdicts;
* ``hook_config_problems_total{kind}``: configuration problems found when a
  session opens, ``kind`` from `CONFIG_PROBLEM_KINDS` (a hooks file, the proxy
  variable), each counted once per session, not per call;
* for the AX Code dialect, ``hook_runs_total`` and ``hook_duration_seconds``
  with its event names (``PreToolUse``...) and outcomes (``ax.model.AxOutcome``),
  ``hook_lifecycle_decisions_total{event,decision,cause}`` for the events
  that can block, and ``hook_observations_dropped_total{event}``.

Label values come only from those enums: never a group name, a command, a URL
or a tool name chosen by the sandbox. Each ``HookMetrics`` has its own
registry unless given one, so tests can use a fresh one. They are served by
`common.serve.MetricsServer` (`hookrunner session --metrics`).
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from hookrunner.ax.model import (
    BLOCKING_EVENTS,
    OBSERVATION_EVENTS,
    AxEvent,
    AxOutcome,
    Cause,
    Verdict,
)
from hookrunner.model import Event, HandlerRun, HandlerType, Outcome

CONFIG_PROBLEM_KINDS = ("hooks_file", "https_proxy")
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_SHARED_FAILURES = {Outcome.TIMEOUT}
_FAILURES = {
    HandlerType.COMMAND: {
        Outcome.EXIT_NONZERO,
        Outcome.NOT_FOUND,
        Outcome.NOT_EXECUTABLE,
        Outcome.CRASHED,
        Outcome.SPAWN_ERROR,
    },
    HandlerType.HTTP: {
        Outcome.HTTP_ERROR,
        Outcome.NETWORK_ERROR,
        Outcome.TLS_ERROR,
        Outcome.PROXY_REFUSED,
        Outcome.PROXY_UNUSABLE,
    },
}
_PRE_ONLY = {
    Outcome.ALLOW,
    Outcome.DENY,
    Outcome.EMPTY_OUTPUT,
    Outcome.UNRECOGNISED,
    Outcome.UNPARSEABLE,
    Outcome.NEAR_MISS,
    Outcome.TRUNCATED,
}


_AX_FAILURES = {
    AxOutcome.EXIT_NONZERO,
    AxOutcome.NOT_FOUND,
    AxOutcome.NOT_EXECUTABLE,
    AxOutcome.CRASHED,
    AxOutcome.TIMEOUT,
    AxOutcome.SPAWN_ERROR,
}
# Which causes go with which verdict, for the events that can block.
DECISION_CAUSES = {
    Verdict.ALLOW: (Cause.NO_HOOKS, Cause.ALLOWED, Cause.SKIPPED),
    Verdict.DENY: (
        Cause.BLOCK_ON_FAILURE,
        Cause.EXIT_2,
        Cause.PERMISSION_DENY,
        Cause.DECISION_BLOCK,
        Cause.CONTINUE_FALSE,
        Cause.MALFORMED_OUTPUT,
        Cause.ASK_HEADLESS,
        Cause.ASK_ON_PROMPT,
    ),
    Verdict.ASK: (Cause.ASK,),
}


def possible_lifecycle_outcomes(event: AxEvent) -> frozenset[AxOutcome]:
    """The outcomes a hook of this AX Code event can have."""
    if event in OBSERVATION_EVENTS:
        own = {AxOutcome.OK, AxOutcome.CANCELLED}
    elif event in BLOCKING_EVENTS:
        own = {AxOutcome.OK, AxOutcome.ALLOW, AxOutcome.DENY, AxOutcome.ASK}
        own |= {AxOutcome.EXIT_2, AxOutcome.MALFORMED}
    elif event is AxEvent.POST_TOOL_USE:
        own = {AxOutcome.OK, AxOutcome.EXIT_2, AxOutcome.MALFORMED}
    else:
        own = {AxOutcome.OK, AxOutcome.EXIT_2}
    return frozenset(own | _AX_FAILURES)


def possible_outcomes(event: Event, kind: HandlerType) -> frozenset[Outcome]:
    """The outcomes a handler of this type can have for this event."""
    own = _PRE_ONLY if event is Event.PRE else {Outcome.OK}
    return frozenset(own | _SHARED_FAILURES | _FAILURES[kind])


class HookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.runs = Counter(
            "hook_runs_total",
            "Handler runs by event, handler type and outcome (fail-open causes apart).",
            ["event", "type", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "hook_duration_seconds",
            "Wall-clock duration of one handler run.",
            ["event", "type"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.warnings = Counter(
            "hook_warnings_total",
            "Warning lines written: skipped configuration, fail-open causes, near misses.",
            ["kind"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "hook_decisions_total",
            "Aggregated pre_tool_execution decisions.",
            ["decision"],
            registry=self.registry,
        )
        self.config_problems = Counter(
            "hook_config_problems_total",
            "Configuration problems found when a session opened (hooks file, HTTPS_PROXY).",
            ["kind"],
            registry=self.registry,
        )
        for problem_kind in CONFIG_PROBLEM_KINDS:
            self.config_problems.labels(problem_kind)
        for event in Event:
            for kind in HandlerType:
                self.duration.labels(event.value, kind.value)
                for outcome in possible_outcomes(event, kind):
                    self.runs.labels(event.value, kind.value, outcome.value)
        for decision in ("allow", "deny"):
            self.decisions.labels(decision)
        self.lifecycle_decisions = Counter(
            "hook_lifecycle_decisions_total",
            "Decisions of AX Code events that can block, by verdict and cause.",
            ["event", "decision", "cause"],
            registry=self.registry,
        )
        self.observations_dropped = Counter(
            "hook_observations_dropped_total",
            "Observation-only AX Code events that were not run (queue full, session closed).",
            ["event"],
            registry=self.registry,
        )
        command = HandlerType.COMMAND.value
        for ax_event in AxEvent:
            self.duration.labels(ax_event.value, command)
            for ax_outcome in possible_lifecycle_outcomes(ax_event):
                self.runs.labels(ax_event.value, command, ax_outcome.value)
            if ax_event in OBSERVATION_EVENTS:
                self.observations_dropped.labels(ax_event.value)
            if ax_event in BLOCKING_EVENTS:
                for verdict, causes in DECISION_CAUSES.items():
                    for cause in causes:
                        self.lifecycle_decisions.labels(ax_event.value, verdict.value, cause.value)

    def observe_run(self, run: HandlerRun) -> None:
        kind = run.handler.type.value
        self.runs.labels(run.event.value, kind, run.outcome.value).inc()
        self.duration.labels(run.event.value, kind).observe(run.duration)

    def observe_lifecycle_run(self, event: AxEvent, outcome: AxOutcome, duration: float) -> None:
        command = HandlerType.COMMAND.value
        self.runs.labels(event.value, command, outcome.value).inc()
        self.duration.labels(event.value, command).observe(duration)

    def observe_lifecycle_decision(self, event: AxEvent, decision: Verdict, cause: Cause) -> None:
        self.lifecycle_decisions.labels(event.value, decision.value, cause.value).inc()

    def observe_observation_dropped(self, event: AxEvent) -> None:
        self.observations_dropped.labels(event.value).inc()

    def observe_config_problem(self, kind: str) -> None:
        if kind not in CONFIG_PROBLEM_KINDS:
            raise ValueError(f"unknown configuration problem kind {kind!r}")
        self.config_problems.labels(kind).inc()

    def observe_warning(self, kind: str) -> None:
        self.warnings.labels(kind).inc()

    def observe_decision(self, allowed: bool) -> None:
        self.decisions.labels("allow" if allowed else "deny").inc()

    def value(self, name: str, **labels: str) -> float:
        """The current value of one sample (0 when absent); for tests and debugging."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


_default: HookMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> HookMetrics:
    """The process-wide metrics on prometheus_client's global registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = HookMetrics(REGISTRY)
        return _default
