"""Warnings and decision lines: one structured line each, logged and in the metrics.

Line format (logfmt; values with spaces or quotes are JSON-quoted)::

    hookrunner: warning kind=fail_open event=pre_tool_execution type=command outcome=timeout
        group=security-gate where="/.agents/hooks.json $.security-gate.pre_tool_execution[0]..."
        cause="did not finish within 10 s; its process group was killed" action=allowed

(one physical line). ``kind`` is a ``WarningKind`` (``config`` and ``fail_open``
are every dialect's; a dialect adds its own enum of kinds). Every line goes through
the ``Redactor`` built from the runner's environment, so no secret value of
that environment can be printed, whatever a handler wrote to its stderr.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from enum import StrEnum
from typing import TextIO

from sandbox_egress.hookrunner.enforce.envsan import Redactor
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.model import Problem
from sandbox_egress.hookrunner.proxyroute import ProxyProblem

log = logging.getLogger("hookrunner.report")  # not __name__: the package prefix stays out of logs

_BARE = re.compile(r"[A-Za-z0-9_.:/@+\-\[\]$]+")


class WarningKind(StrEnum):
    CONFIG = "config"  # a configuration problem; that part is skipped or ignored
    FAIL_OPEN = "fail_open"  # a pre handler failed and the call was allowed
    FAIL_CLOSED = "fail_closed"  # a pre handler of a fail-closed group failed: denied
    INPUT_REFUSED = "input_refused"  # a payload beyond ``bounds``: no hook saw it
    WORKSPACE = "workspace"  # the tool user cannot write the workspace (said once, at start)
    BOUNDARY = "boundary"  # no namespace for the tools: no git guard, no mask (once, at start)
    # The hooks.json dialect's:
    NEAR_MISS = "near_miss"  # a pre handler's output looked like a deny but was not one
    POST_FAILURE = "post_failure"  # a post handler failed (nothing to allow or deny)
    # A dialect adds its own kinds (``hookrunner.ax.model.AxWarningKind``).


def format_line(level: str, fields: dict[str, str]) -> str:
    parts = [f"hookrunner: {level}"]
    for key, value in fields.items():
        shown = value if value and _BARE.fullmatch(value) else json.dumps(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)


class Reporter:
    """Writes warning/decision lines and feeds the metrics; safe to share between threads.

    Lines go to ``stream`` when one is given, else through ``logging`` (the logger
    ``hookrunner.report``: warnings at WARNING, decision lines at INFO), so a runtime
    that embeds the Python API routes them with its own handlers; the command line
    prints them on stderr as they are (``console.configure_logging``).
    """

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
        if self.stream is None:
            log.log(logging.WARNING if level == "warning" else logging.INFO, line)
            return
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def line(self, level: str, fields: dict[str, str]) -> None:
        """One redacted line that is not a warning (a dialect's decision line)."""
        self._write(level, fields)

    def warn(self, kind: StrEnum, **fields: str) -> None:
        self.metrics.observe_warning(kind.value)
        self._write("warning", {"kind": kind.value, **fields})

    def input_refused(self, event: str, reason: str, *, blocks: bool) -> None:
        """A payload beyond the bound (``bounds``): refused before any hook saw it."""
        action = "denied" if blocks else "hooks_skipped"
        self.warn(WarningKind.INPUT_REFUSED, event=event, cause=reason, action=action)

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
