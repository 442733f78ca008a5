"""Warnings and decision lines: one structured line each, on stderr and in the metrics.

Line format (logfmt; values with spaces or quotes are JSON-quoted)::

    hookrunner: warning kind=fail_open event=pre_tool_execution type=command outcome=timeout
        group=security-gate where="/.agents/hooks.json $.security-gate.pre_tool_execution[0]..."
        cause="did not finish within 10 s; its process group was killed" action=allowed

(one physical line). ``kind`` is a ``WarningKind``. Every line goes through
the ``Redactor`` built from the runner's environment, so no secret value of
that environment can be printed, whatever a handler wrote to its stderr.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import TextIO

from hookrunner.envsan import Redactor
from hookrunner.metrics import HookMetrics
from hookrunner.model import Event, HandlerRun, Outcome, PreDecision, Problem
from hookrunner.proxyroute import ProxyProblem

_BARE = re.compile(r"[A-Za-z0-9_.:/@+\-\[\]$]+")


class WarningKind(StrEnum):
    CONFIG = "config"  # a configuration problem; that part is skipped or ignored
    FAIL_OPEN = "fail_open"  # a pre handler failed and the call was allowed
    NEAR_MISS = "near_miss"  # a pre handler's output looked like a deny but was not one
    POST_FAILURE = "post_failure"  # a post handler failed (nothing to allow or deny)
    # The AX Code dialect (hookrunner.ax):
    FAIL_SAFE = (
        "fail_safe"  # a hook failed or printed a malformed answer and the action was blocked
    )
    HOOK_FAILURE = "hook_failure"  # a hook of an event that cannot block failed
    PAYLOAD = "payload"  # fields of an observation-only payload were dropped (names only)
    DROPPED = "dropped"  # an observation-only event could not be run


def format_line(level: str, fields: dict[str, str]) -> str:
    parts = [f"hookrunner: {level}"]
    for key, value in fields.items():
        shown = value if value and _BARE.fullmatch(value) else json.dumps(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


class Reporter:
    """Writes warning/decision lines and feeds the metrics; safe to share between threads."""

    def __init__(
        self,
        metrics: HookMetrics,
        *,
        stream: TextIO | None = None,
        redact: Callable[[str], str] | None = None,
        log_decisions: bool = True,
    ) -> None:
        self.metrics = metrics
        self.stream = stream
        self.redact = redact or Redactor(())
        self.log_decisions = log_decisions
        self._lock = threading.Lock()

    def _write(self, level: str, fields: dict[str, str]) -> None:
        line = self.redact(format_line(level, fields))
        stream = self.stream if self.stream is not None else sys.stderr
        with self._lock:
            stream.write(line + "\n")
            stream.flush()

    def line(self, level: str, fields: dict[str, str]) -> None:
        """One redacted line that is not a warning (a decision line of another dialect)."""
        self._write(level, fields)

    def warn(self, kind: WarningKind, **fields: str) -> None:
        self.metrics.observe_warning(kind.value)
        self._write("warning", {"kind": kind.value, **fields})

    def problem(self, problem: Problem) -> None:
        self.metrics.observe_config_problem("hooks_file")
        self.warn(
            WarningKind.CONFIG,
            file=problem.file,
            path=problem.location,
            cause=problem.message,
        )

    def proxy_problem(self, problem: ProxyProblem) -> None:
        """The proxy variable is unusable: one line per session, before any handler runs."""
        self.metrics.observe_config_problem("https_proxy")
        self.warn(
            WarningKind.CONFIG,
            variable=problem.variable,
            cause=f"{problem.reason}; http handlers that need it fail open (proxy_unusable)",
        )

    def handler_run(self, run: HandlerRun) -> None:
        self.metrics.observe_run(run)
        if not run.outcome.failed:
            return
        if run.event is Event.POST:
            kind = WarningKind.POST_FAILURE
        elif run.outcome is Outcome.NEAR_MISS:
            kind = WarningKind.NEAR_MISS
        else:
            kind = WarningKind.FAIL_OPEN
        fields = {
            "event": run.event.value,
            "type": run.handler.type.value,
            "outcome": run.outcome.value,
            "group": run.group,
            "where": run.handler.where,
            "cause": run.detail,
        }
        if run.event is Event.PRE:
            fields["action"] = "allowed"
        self.warn(kind, **fields)

    def decision(self, tool: str, decision: PreDecision) -> None:
        self.metrics.observe_decision(decision.allowed)
        if not self.log_decisions:
            return
        fields = {
            "event": Event.PRE.value,
            "tool": tool,
            "decision": "allow" if decision.allowed else "deny",
            "handlers": str(len(decision.runs)),
        }
        if not decision.allowed:
            fields["group"] = decision.group or ""
            fields["reason"] = decision.reason or ""
        self._write("decision", fields)
