"""Running one AX entry for one event as a child process, then decoding and reporting it.

The mechanism is the kernel's ``Kernel.spawn`` (own process group, deadline,
bounded output, group kill, the environment of the one sanitiser shared with
the hooks.json dialect), with this dialect's ``HOOK_*`` variables:
``HOOK_EVENT``, ``HOOK_TOOL``, ``HOOK_SESSION_ID``,
``HOOK_ARGS_JSON`` (empty above 32 KiB of UTF-8), ``HOOK_ARGS_STDIN=1``,
``HOOK_PACK`` (``""`` for custom entries), plus ``PWD`` and, for claude-code
entries, ``CLAUDE_PROJECT_DIR`` (the workspace) that Claude Code hooks use to
find their scripts. The full arguments are always on stdin. Inside the warm runner a
pack entry runs as a call of the pack's function instead of a process (``packs.warm``,
D396): the same input, the same kind of result.

An ``http`` entry (a Claude Code settings file's http handler) is POSTed
instead, by the client of the hooks.json dialect (``httpclient``: through the
egress proxy, https, no redirects), its headers interpolated from the runner's
environment for ``allowedEnvVars`` only; a 2xx body is decoded as stdout.

Every failed run is one warning line and every run a metric; every decision
of an event that can block is one decision line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sandbox_egress.hookrunner.ax.decode import Decoded, decode
from sandbox_egress.hookrunner.ax.envelope import args_document, claude_code_document
from sandbox_egress.hookrunner.ax.events import EventInput
from sandbox_egress.hookrunner.ax.feedback import NOTICE_CHARS, PER_HOOK_CHARS, bound, hook_feedback
from sandbox_egress.hookrunner.ax.firebound import wraps
from sandbox_egress.hookrunner.ax.metrics import observe_decision
from sandbox_egress.hookrunner.ax.model import (
    BLOCKING_EVENTS,
    AxEntry,
    AxWarningKind,
    Effect,
    FireResult,
    HookRun,
    HttpTarget,
    Protocol,
)
from sandbox_egress.hookrunner.ax.packs import warm
from sandbox_egress.hookrunner.enforce.command import CancelToken, ProcessResult
from sandbox_egress.hookrunner.enforce.envsan import args_json, hook_variables
from sandbox_egress.hookrunner.httpclient import HttpClient
from sandbox_egress.hookrunner.kernel import Kernel
from sandbox_egress.hookrunner.model import encode_json
from sandbox_egress.hookrunner.outcome import HandlerType, Outcome, classify_http
from sandbox_egress.hookrunner.report import WarningKind


def entry_variables(
    workspace: str, entry: AxEntry, inp: EventInput, boundary: str = ""
) -> dict[str, str]:
    """The variables this dialect adds to the kernel's hook environment; ``boundary``:
    ``HOOK_BOUNDARY`` for a Bash call the runner wraps in its boundary (``firebound``)."""
    env = hook_variables(
        inp.event.value,
        inp.tool,
        args_document(inp),
        session_id=inp.session_id,
        pack=entry.pack,
        boundary=boundary if boundary and wraps(inp) else None,
    )
    if entry.protocol is Protocol.CLAUDE_CODE:
        env["CLAUDE_PROJECT_DIR"] = workspace
    return env


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def interpolate(value: str, allowed: tuple[str, ...], environ: Mapping[str, str]) -> str:
    """``$VAR`` / ``${VAR}`` of a header: the runner's value when listed in allowedEnvVars,
    else empty (Claude Code's rule); a value with a control character is sent empty."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        found = environ.get(name, "") if name in allowed else ""
        return "" if _CONTROL.search(found) else found

    return _VARIABLE.sub(one, value)


def hook_stdin(workspace: str, entry: AxEntry, inp: EventInput) -> bytes:
    if entry.protocol is Protocol.CLAUDE_CODE:
        return encode_json(claude_code_document(inp, workspace))
    return args_json(args_document(inp)).encode("utf-8")


class LifecycleExecutor:
    def __init__(self, kernel: Kernel, boundary: str = "") -> None:
        self.kernel = kernel
        self.boundary = boundary  # what stands below a Bash call the runner wraps (D380)
        self.workspace = str(kernel.workspace)
        self.reporter = kernel.reporter
        self.metrics = kernel.metrics
        self.http = HttpClient(kernel.environ)

    def run(self, entry: AxEntry, inp: EventInput, cancel: CancelToken | None = None) -> HookRun:
        if entry.http is not None:
            decoded, result = self._post(entry, entry.http, inp)
        elif warm.applies(entry.pack, entry.command):  # inside the warm runner (D396)
            variables = entry_variables(self.workspace, entry, inp, self.boundary)
            result = warm.run(
                entry.pack,
                stdin=hook_stdin(self.workspace, entry, inp),
                cwd=self.workspace,
                env={**self.kernel.hook_env, "PWD": self.workspace, **variables},
                timeout=entry.timeout,
            )
            decoded = decode(inp.event, entry, result)
        else:
            result = self.kernel.spawn(
                entry.command,
                stdin=hook_stdin(self.workspace, entry, inp),
                variables=entry_variables(self.workspace, entry, inp, self.boundary),
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
            asked_block=decoded.asked_block,
            carried=decoded.carried,
            context=bound(decoded.context, PER_HOOK_CHARS, what="context")
            if decoded.context
            else None,
        )
        self._report(inp, run)
        return run

    def _post(
        self, entry: AxEntry, target: HttpTarget, inp: EventInput
    ) -> tuple[Decoded, ProcessResult]:
        """An http handler: Claude Code's envelope POSTed (through the egress proxy); a 2xx
        body is read as a claude-code hook's stdout, anything else never blocks."""
        headers = tuple(
            (name, interpolate(value, target.allowed_env, self.kernel.environ))
            for name, value in target.headers
        )
        body = hook_stdin(self.workspace, entry, inp)
        answer = self.http.post(target.url, body, headers, entry.timeout)
        classified = classify_http(answer)
        as_output = ProcessResult(
            0 if classified.outcome is Outcome.OK else 1,
            answer.body,
            b"",
            answer.truncated,
            False,
            False,
            answer.duration,
        )
        if classified.outcome is not Outcome.OK:
            failed = Decoded(classified.outcome, Effect.CONTINUE, classified.detail, failed=True)
            return failed, as_output
        return decode(inp.event, entry, as_output), as_output

    def _report(self, inp: EventInput, run: HookRun) -> None:
        kind = HandlerType.HTTP if run.entry.http is not None else HandlerType.COMMAND
        self.metrics.observe_run(inp.event.value, kind, run.outcome, run.duration)
        if not run.failed:
            return
        fields = {
            "event": inp.event.value,
            "type": kind.value,
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
