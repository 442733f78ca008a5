"""Running one AX entry for one event as a child process, then decoding and reporting it.

The mechanism is the kernel's ``Kernel.spawn`` (own process group, deadline,
bounded output, group kill, the environment of the one sanitiser shared with
the hooks.json dialect), with this dialect's ``HOOK_*`` variables:
``HOOK_EVENT``, ``HOOK_TOOL``, ``HOOK_SESSION_ID``,
``HOOK_ARGS_JSON`` (empty above 32 KiB of UTF-8), ``HOOK_ARGS_STDIN=1``,
``HOOK_PACK`` (``""`` for custom entries), plus ``PWD`` and, for claude-code
entries, ``CLAUDE_PROJECT_DIR`` (the workspace) that Claude Code hooks use to
find their scripts. The full arguments are always on stdin.

Every failed run is one warning line and every run a metric; every decision
of an event that can block is one decision line.
"""

from __future__ import annotations

from hookrunner.ax.decode import decode
from hookrunner.ax.envelope import args_document, claude_code_document
from hookrunner.ax.events import EventInput
from hookrunner.ax.feedback import NOTICE_CHARS, PER_HOOK_CHARS, bound, hook_feedback
from hookrunner.ax.metrics import observe_decision
from hookrunner.ax.model import (
    BLOCKING_EVENTS,
    AxEntry,
    AxWarningKind,
    Effect,
    FireResult,
    HookRun,
    Protocol,
)
from hookrunner.command import CancelToken
from hookrunner.envsan import args_json, hook_variables
from hookrunner.kernel import Kernel
from hookrunner.model import encode_json
from hookrunner.outcome import HandlerType
from hookrunner.report import WarningKind


def entry_variables(workspace: str, entry: AxEntry, inp: EventInput) -> dict[str, str]:
    """The variables this dialect adds to the kernel's hook environment."""
    env = hook_variables(
        inp.event.value, inp.tool, args_document(inp), session_id=inp.session_id, pack=entry.pack
    )
    if entry.protocol is Protocol.CLAUDE_CODE:
        env["CLAUDE_PROJECT_DIR"] = workspace
    return env


def hook_stdin(workspace: str, entry: AxEntry, inp: EventInput) -> bytes:
    if entry.protocol is Protocol.CLAUDE_CODE:
        return encode_json(claude_code_document(inp, workspace))
    return args_json(args_document(inp)).encode("utf-8")


class LifecycleExecutor:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.workspace = str(kernel.workspace)
        self.reporter = kernel.reporter
        self.metrics = kernel.metrics

    def run(self, entry: AxEntry, inp: EventInput, cancel: CancelToken | None = None) -> HookRun:
        result = self.kernel.spawn(
            entry.command,
            stdin=hook_stdin(self.workspace, entry, inp),
            variables=entry_variables(self.workspace, entry, inp),
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
        self.metrics.observe_run(inp.event.value, HandlerType.COMMAND, run.outcome, run.duration)
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
            self.reporter.warn(AxWarningKind.HOOK_FAILURE, **fields)
        elif run.effect is Effect.BLOCK:
            self.reporter.warn(AxWarningKind.FAIL_SAFE, **fields, action="blocked")
        else:
            self.reporter.warn(WarningKind.FAIL_OPEN, **fields, action="allowed")

    def report_decision(self, inp: EventInput, result: FireResult, *, log: bool = True) -> None:
        observe_decision(self.metrics, inp.event, result.decision, result.cause)
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
