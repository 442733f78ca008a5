"""Running one AX entry for one event as a child process, then decoding and reporting it.

The mechanism is ``command.run_process`` (own process group, deadline,
bounded output, group kill) and the environment is ``envsan``'s sanitised
base (the same sanitiser as the hooks.json dialect), then the ``HOOK_*``
variables: ``HOOK_EVENT``, ``HOOK_TOOL``, ``HOOK_SESSION_ID``,
``HOOK_ARGS_JSON`` (empty above 32 KiB of UTF-8), ``HOOK_ARGS_STDIN=1``,
``HOOK_PACK`` (``""`` for custom entries), plus ``PWD`` and, for claude-code
entries, ``CLAUDE_PROJECT_DIR`` (the workspace) that Claude Code hooks use to
find their scripts. The full arguments are always on stdin.

Every failed run is one warning line and every run a metric; every decision
of an event that can block is one decision line.
"""

from __future__ import annotations

from collections.abc import Mapping

from hookrunner.ax.decode import decode
from hookrunner.ax.envelope import args_document, claude_code_document
from hookrunner.ax.events import EventInput
from hookrunner.ax.feedback import PER_HOOK_CHARS, bound, hook_feedback
from hookrunner.ax.model import (
    BLOCKING_EVENTS,
    AxEntry,
    Effect,
    FireResult,
    HookRun,
    Protocol,
)
from hookrunner.command import CancelToken, run_process
from hookrunner.dispatch import SHELL
from hookrunner.envsan import args_json, hook_variables
from hookrunner.metrics import HookMetrics
from hookrunner.model import HandlerType, encode_json
from hookrunner.report import Reporter, WarningKind

NOTICE_CHARS = 4000


def hook_environment(
    base_env: Mapping[str, str], workspace: str, entry: AxEntry, inp: EventInput
) -> dict[str, str]:
    env = {
        **base_env,
        "PWD": workspace,
        **hook_variables(
            inp.event.value,
            inp.tool,
            args_document(inp),
            session_id=inp.session_id,
            pack=entry.pack,
        ),
    }
    if entry.protocol is Protocol.CLAUDE_CODE:
        env["CLAUDE_PROJECT_DIR"] = workspace
    return env


def hook_stdin(workspace: str, entry: AxEntry, inp: EventInput) -> bytes:
    if entry.protocol is Protocol.CLAUDE_CODE:
        return encode_json(claude_code_document(inp, workspace))
    return args_json(args_document(inp)).encode("utf-8")


class LifecycleExecutor:
    def __init__(
        self,
        workspace: str,
        base_env: Mapping[str, str],
        reporter: Reporter,
        metrics: HookMetrics,
    ) -> None:
        self.workspace = workspace
        self.base_env = dict(base_env)
        self.reporter = reporter
        self.metrics = metrics

    def run(self, entry: AxEntry, inp: EventInput, cancel: CancelToken | None = None) -> HookRun:
        result = run_process(
            [SHELL, "-c", entry.command],
            stdin=hook_stdin(self.workspace, entry, inp),
            cwd=self.workspace,
            env=hook_environment(self.base_env, self.workspace, entry, inp),
            timeout=entry.timeout,
            cancel=cancel,
        )
        decoded = decode(inp.event, entry, result)
        run = HookRun(
            entry=entry,
            outcome=decoded.outcome,
            effect=decoded.effect,
            detail=decoded.detail,
            duration=result.duration,
            reason=decoded.reason,
            cause=decoded.cause,
            feedback=hook_feedback(decoded.feedback) if decoded.feedback else None,
            notice=bound(decoded.notice, NOTICE_CHARS, what="notice") if decoded.notice else None,
            failed=decoded.failed,
            context=bound(decoded.context, PER_HOOK_CHARS, what="context")
            if decoded.context
            else None,
        )
        self._report(inp, run)
        return run

    def _report(self, inp: EventInput, run: HookRun) -> None:
        self.metrics.observe_lifecycle_run(inp.event, run.outcome, run.duration)
        if not run.failed:
            return
        fields = {
            "event": inp.event.value,
            "type": HandlerType.COMMAND.value,
            "outcome": run.outcome.value,
            "source": run.entry.source,
            "where": run.entry.where,
            "cause": run.detail,
        }
        if inp.event not in BLOCKING_EVENTS:
            self.reporter.warn(WarningKind.HOOK_FAILURE, **fields)
        elif run.effect is Effect.BLOCK:
            self.reporter.warn(WarningKind.FAIL_SAFE, **fields, action="blocked")
        else:
            self.reporter.warn(WarningKind.FAIL_OPEN, **fields, action="allowed")

    def report_decision(self, inp: EventInput, result: FireResult, *, log: bool = True) -> None:
        self.metrics.observe_lifecycle_decision(inp.event, result.decision, result.cause)
        if not log:
            return
        fields = {
            "event": inp.event.value,
            "tool": inp.tool,
            "decision": result.decision.value,
            "cause": result.cause.value,
            "hooks": str(len(result.runs)),
        }
        if result.source is not None:
            fields["source"] = result.source
        if result.reason is not None and not result.allowed:
            fields["reason"] = result.reason
        self.reporter.line("decision", fields)
