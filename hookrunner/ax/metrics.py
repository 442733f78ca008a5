"""The AX Code dialect's metrics, registered with the kernel's ``HookMetrics``.

* ``hook_runs_total`` and ``hook_duration_seconds`` with this dialect's event
  names (``PreToolUse``...) and type ``command``; the outcomes each event can
  have start at zero (``possible_outcomes``);
* ``hook_lifecycle_decisions_total{event,decision,cause}`` for the events that
  can block, the causes of each verdict from ``DECISION_CAUSES``;
* ``hook_observations_dropped_total{event}`` for the observation-only events.

Importing ``hookrunner.ax`` registers ``register`` (``metrics.register_dialect``);
a session also calls ``HookMetrics.use``, so metrics made before the import
work too.
"""

from __future__ import annotations

from sandbox_egress.hookrunner.ax.eventtable import (
    BLOCKING_EVENTS,
    OBSERVATION_EVENTS,
    AxEvent,
    Output,
    spec_of,
)
from sandbox_egress.hookrunner.ax.model import Cause, Verdict
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.outcome import MECHANISM_FAILURES, HandlerType, Outcome

DECISIONS = "hook_lifecycle_decisions_total"
DROPPED = "hook_observations_dropped_total"
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
        Cause.INPUT_REFUSED,
    ),
    Verdict.ASK: (Cause.ASK,),
}


# The outcomes a hook can have, by what its output means (eventtable.Output).
_OUTCOMES = {
    Output.IGNORED: {Outcome.OK, Outcome.CANCELLED},
    Output.DECISION: {
        Outcome.OK,
        Outcome.ALLOW,
        Outcome.DENY,
        Outcome.ASK,
        Outcome.EXIT_2,
        Outcome.MALFORMED,
    },
    Output.FEEDBACK: {Outcome.OK, Outcome.EXIT_2, Outcome.MALFORMED},
    Output.NOTICE: {Outcome.OK, Outcome.EXIT_2, Outcome.DENY},
}


def possible_outcomes(event: AxEvent) -> frozenset[Outcome]:
    """The outcomes a hook of this AX Code event can have."""
    own = _OUTCOMES[spec_of(event).output]
    return frozenset(own | MECHANISM_FAILURES[HandlerType.COMMAND])


def register(metrics: HookMetrics) -> None:
    decisions = metrics.add_counter(
        DECISIONS,
        "Decisions of AX Code events that can block, by verdict and cause.",
        ["event", "decision", "cause"],
    )
    dropped = metrics.add_counter(
        DROPPED,
        "Observation-only AX Code events that were not run (queue full, session closed).",
        ["event"],
    )
    for event in AxEvent:
        metrics.expect_runs(event.value, HandlerType.COMMAND, possible_outcomes(event))
        if event in OBSERVATION_EVENTS:
            dropped.labels(event.value)
        if event in BLOCKING_EVENTS:
            for verdict, causes in DECISION_CAUSES.items():
                for cause in causes:
                    decisions.labels(event.value, verdict.value, cause.value)


def observe_decision(metrics: HookMetrics, event: AxEvent, verdict: Verdict, cause: Cause) -> None:
    metrics.extra[DECISIONS].labels(event.value, verdict.value, cause.value).inc()


def observe_dropped(metrics: HookMetrics, event: AxEvent) -> None:
    metrics.extra[DROPPED].labels(event.value).inc()
