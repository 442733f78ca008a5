"""The hook kernel: what a session of every dialect shares.

A dialect (hooks.json in this package, AX Code / Claude Code in
``hookrunner.ax``) adds its events, its files and their schema, the decoding of
what a hook printed, and how runs become the event's decision. The kernel gives
it, in one place:
* ``env_switch`` / ``full_env_switch``: operator switches read from the
  runner's environment, on only for exactly ``1``; any other value is ignored
  with a notice that says so (never silently);
* ``Kernel``: session setup. The runner is made undumpable before anything is
  spawned (``/proc/<runner>/environ`` stays closed), the workspace is resolved
  and must be a directory, the environment is snapshotted once, and the
  ``Reporter`` redacts every secret value of that snapshot. ``start_hooks``
  fixes the environment command hooks run with (the one sanitiser of
  ``envsan``, then ``isolation``, then ``programs``: only runner-owned
  ``PATH`` entries and the like, a warning per dropped entry), and ``spawn``
  runs one command hook as ``/bin/sh -c COMMAND`` in the workspace with that
  environment, ``PWD`` and
  the dialect's ``HOOK_*`` variables (``command.run_process``: own process
  group, deadline, bounded output, group kill).

Outcome types are in ``outcome``, reporting in ``report``, metrics (and the
registration of a dialect's series) in ``metrics``. Nothing here knows a dialect.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sandbox_egress.common.process import CancelToken, ProcessResult, run_process
from sandbox_egress.hookrunner.enforce.envsan import Redactor, sanitise
from sandbox_egress.hookrunner.enforce.isolation import hook_environment, make_undumpable
from sandbox_egress.hookrunner.enforce.programs import filter_paths
from sandbox_egress.hookrunner.errors import WorkspaceError
from sandbox_egress.hookrunner.metrics import HookMetrics, default_metrics
from sandbox_egress.hookrunner.model import Problem
from sandbox_egress.hookrunner.report import Reporter, WarningKind

SHELL = "/bin/sh"
FULL_ENV_VARIABLE = "HOOKRUNNER_FULL_ENV"


@dataclass(frozen=True)
class Switch:
    """An operator switch read from outside the repository, with why it is off when set."""

    on: bool
    notice: str | None = None


def env_switch(environ: Mapping[str, str], flag: bool | None, variables: Sequence[str]) -> Switch:
    """The flag when given; else on when one of the variables, in order, is exactly ``1``.

    The notice names the first variable that is set to something else, unless an
    earlier one already turned the switch on.
    """
    if flag is not None:
        return Switch(flag)
    notice: str | None = None
    for name in variables:
        value = environ.get(name)
        if value == "1":
            return Switch(True, notice)
        if value is not None and notice is None:
            notice = f"{name} is {value[:20]!r}, not '1', so it is ignored"
    return Switch(False, notice)


def full_env_switch(
    environ: Mapping[str, str], flag: bool | None = None, *dialect_variables: str
) -> Switch:
    """The escape hatch: the flag, else a dialect's own variable or HOOKRUNNER_FULL_ENV=1."""
    return env_switch(environ, flag, (*dialect_variables, FULL_ENV_VARIABLE))


class Kernel:
    """The shared part of one session: workspace, environment, metrics, reporter, spawning."""

    def __init__(
        self,
        workspace: str | Path,
        *,
        environ: Mapping[str, str] | None = None,
        metrics: HookMetrics | None = None,
        stream: TextIO | None = None,
        log_decisions: bool = True,
    ) -> None:
        make_undumpable()  # before anything is spawned: /proc/<runner>/environ stays closed
        root = Path(os.path.realpath(workspace))
        if not root.is_dir():
            raise WorkspaceError(f"workspace {str(workspace)!r} is not a directory")
        self.workspace = root
        self.environ = dict(os.environ if environ is None else environ)
        self.metrics = metrics if metrics is not None else default_metrics()
        self.reporter = Reporter(
            self.metrics,
            stream=stream,
            redact=Redactor.from_environment(self.environ),
            log_decisions=log_decisions,
        )
        self.hook_env: dict[str, str] = {}

    def configuration(self, problems: Iterable[Problem], notices: Iterable[str | None]) -> None:
        """Report what is wrong with the configuration, once, when the session opens."""
        for problem in problems:
            self.reporter.problem(problem)
        for notice in notices:
            if notice is not None:
                self.reporter.warn(WarningKind.CONFIG, cause=notice)

    def start_hooks(self, full_env: bool) -> None:
        """Fix the environment command hooks run with (the full one only when switched on)."""
        variables = sanitise(self.environ, full_env=full_env).variables
        env = hook_environment(variables, self.environ, self.workspace)
        self.hook_env, dropped = filter_paths(env, self.workspace)
        for each in dropped:  # once per session and entry
            self.reporter.warn(
                WarningKind.CONFIG, variable=each.variable, entry=each.entry, cause=each.cause
            )

    def spawn(
        self,
        command: str,
        *,
        stdin: bytes,
        variables: Mapping[str, str],
        timeout: float,
        cancel: CancelToken | None = None,
    ) -> ProcessResult:
        """Run one command hook in the workspace; ``variables`` are the dialect's HOOK_*."""
        workspace = str(self.workspace)
        return run_process(
            [SHELL, "-c", command],
            stdin=stdin,
            cwd=workspace,
            env={**self.hook_env, "PWD": workspace, **variables},
            timeout=timeout,
            cancel=cancel,
        )
