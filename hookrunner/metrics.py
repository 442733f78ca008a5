"""The hook runner's Prometheus metrics, in one place.

* ``hook_runs_total{event,type,outcome}``: one per handler run; ``outcome`` is
  ``outcome.Outcome`` (one closed set for every dialect), so fail-open causes are counted apart;
* ``hook_duration_seconds{event,type}``: how long each handler run took;
* ``hook_warnings_total{kind}``: every warning line (``report.WarningKind``);
* ``hook_decisions_total{decision}``: the aggregated pre_tool_execution verdicts;
* ``hook_config_problems_total{kind}``: configuration problems found when a
  session opens, ``kind`` from `CONFIG_PROBLEM_KINDS` (a hooks file, the proxy
  variable), each counted once per session, not per call;
* another dialect registers its own series and metrics (``register_dialect``):
  the AX Code dialect's are in ``hookrunner.ax.metrics``. This module knows
  no dialect but the hooks.json one of its own package.

Label values come only from those enums: never a group name, a command, a URL
or a tool name chosen by the sandbox. Each ``HookMetrics`` has its own
registry unless given one, so tests can use a fresh one. They are served by
`common.serve.MetricsServer` (`hookrunner session --metrics`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

from sandbox_egress.hookrunner.model import Event
from sandbox_egress.hookrunner.outcome import MECHANISM_FAILURES, HandlerType, Outcome

CONFIG_PROBLEM_KINDS = ("hooks_file", "https_proxy")
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_PRE_ONLY = {
    Outcome.ALLOW,
    Outcome.DENY,
    Outcome.EMPTY_OUTPUT,
    Outcome.UNRECOGNISED,
    Outcome.UNPARSEABLE,
    Outcome.NEAR_MISS,
    Outcome.TRUNCATED,
}

# A dialect's metrics: called once per ``HookMetrics`` to add its metrics and label sets.
DialectMetrics = Callable[["HookMetrics"], None]
_dialects: list[DialectMetrics] = []
_dialects_lock = threading.Lock()


def register_dialect(register: DialectMetrics) -> None:
    """Add a dialect's metrics to every ``HookMetrics`` made from now on (and the default)."""
    with _dialects_lock:
        if register not in _dialects:
            _dialects.append(register)
    if _default is not None:
        _default.use(register)


def possible_outcomes(event: Event, kind: HandlerType) -> frozenset[Outcome]:
    """The outcomes a hooks.json handler of this type can have for this event."""
    own = _PRE_ONLY if event is Event.PRE else {Outcome.OK}
    return frozenset(own | MECHANISM_FAILURES[kind])


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
                self.expect_runs(event.value, kind, possible_outcomes(event, kind))
        for decision in ("allow", "deny"):
            self.decisions.labels(decision)
        self.extra: dict[str, Counter] = {}
        self._dialects: set[DialectMetrics] = set()
        with _dialects_lock:
            dialects = list(_dialects)
        for register in dialects:
            self.use(register)

    def use(self, register: DialectMetrics) -> None:
        """Add one dialect's metrics to this registry, once."""
        with _dialects_lock:
            if register in self._dialects:
                return
            self._dialects.add(register)
        register(self)

    def add_counter(self, name: str, documentation: str, labels: Sequence[str]) -> Counter:
        """A dialect's own counter on this registry, kept in ``extra`` under its name."""
        counter = Counter(name, documentation, list(labels), registry=self.registry)
        self.extra[name] = counter
        return counter

    def expect_runs(self, event: str, kind: HandlerType, outcomes: Iterable[Outcome]) -> None:
        """Pre-register the run series of one event, so each starts at zero."""
        self.duration.labels(event, kind.value)
        for outcome in outcomes:
            self.runs.labels(event, kind.value, outcome.value)

    def observe_run(self, event: str, kind: HandlerType, outcome: Outcome, duration: float) -> None:
        self.runs.labels(event, kind.value, outcome.value).inc()
        self.duration.labels(event, kind.value).observe(duration)

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
