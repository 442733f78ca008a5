"""The Python API of the AX Code dialect: one ``AxSession`` per agent session.

Opening a session loads the AX hooks files once (project hooks only when
trusted from outside the repository) and snapshots the environment; ``fire``
fires any of the eleven events::

    with AxSession("/workspace", session_id="ses_1") as session:
        result = session.fire("PreToolUse", {"tool": "bash", "args": {"command": "git push -f"}})
        if not result.allowed:
            ...  # result.reason is what the model sees; result.decision may be "ask"
        after = session.fire("PostToolUse", {"tool": "edit", "args": {...}, "output": out})
        shown = after.with_feedback(out)  # the output, then the <hook_feedback> block
        session.fire("SessionEnd", {"reason": "archive"})  # returns at once (queued)

Blocking and other events run their hooks before ``fire`` returns;
observation-only events are queued to the session's worker and ``fire``
returns at once. ``close`` (or leaving the ``with`` block) waits for the
worker up to a deadline, then stops it; a session that is never closed is
closed when the interpreter exits.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from sandbox_egress.hookrunner.ax import metrics as ax_metrics
from sandbox_egress.hookrunner.ax.aggregate import decide, gather
from sandbox_egress.hookrunner.ax.dispatch import LifecycleExecutor
from sandbox_egress.hookrunner.ax.events import EventInput, parse_event
from sandbox_egress.hookrunner.ax.loader import (
    full_env_switch,
    load_ax_config,
    settings_places,
    trust_switch,
)
from sandbox_egress.hookrunner.ax.model import (
    BLOCKING_EVENTS,
    OBSERVATION_EVENTS,
    AxConfig,
    AxEntry,
    AxEvent,
    AxWarningKind,
    Cause,
    FireResult,
    HookRun,
    Verdict,
)
from sandbox_egress.hookrunner.ax.observe import DEFAULT_CAPACITY, ObservationWorker
from sandbox_egress.hookrunner.enforce.bounds import PayloadRefused
from sandbox_egress.hookrunner.enforce.command import CancelToken
from sandbox_egress.hookrunner.kernel import Kernel
from sandbox_egress.hookrunner.metrics import HookMetrics

CLOSE_TIMEOUT = 5.0


class AxSession:
    def __init__(
        self,
        workspace: str | Path,
        *,
        session_id: str = "",
        environ: Mapping[str, str] | None = None,
        trust_project: bool | None = None,
        full_env: bool | None = None,
        operator_config: str | Path | None = None,
        claude_settings: bool = True,
        managed_settings: str | Path | None = None,
        moved_settings: str | Path | None = None,
        interactive: bool = False,
        claude_answers: bool = False,
        metrics: HookMetrics | None = None,
        stream: TextIO | None = None,
        observation_capacity: int = DEFAULT_CAPACITY,
        log_decisions: bool = True,
        boundary: str = "",
    ) -> None:
        """``boundary``: ``HOOK_BOUNDARY`` for the hooks of a Bash call whose command the
        caller runs under the runner's boundary (``firebound``, D380); empty: none."""
        self.kernel = Kernel(workspace, environ=environ, metrics=metrics, stream=stream)
        self.workspace = root = self.kernel.workspace
        self.session_id = session_id
        # Claude Code's installed hook (D390): Claude Code is the one to show an ask, and an
        # event it reads an answer of (``carried``: SessionStart) runs before the answer.
        self.interactive = interactive or claude_answers
        self.claude_answers = claude_answers
        self.log_decisions = log_decisions
        trust = trust_switch(self.kernel.environ, trust_project)
        full = full_env_switch(self.kernel.environ, full_env)
        self.trusted, self.full_env = trust.on, full.on
        self.metrics, self.reporter = self.kernel.metrics, self.kernel.reporter
        self.metrics.use(ax_metrics.register)  # metrics made before hookrunner.ax was imported
        operator = Path(operator_config) if operator_config is not None else None
        places, nested = settings_places(self.kernel.environ, claude_settings, managed_settings)
        moved = Path(moved_settings) if moved_settings is not None else None
        self.config: AxConfig = load_ax_config(
            root, trusted=trust.on, operator_config=operator, settings=places, moved=moved
        )
        self.kernel.configuration(
            self.config.problems, (trust.notice, full.notice, nested, *self.config.notices)
        )
        self.kernel.start_hooks(full.on)
        self._executor = LifecycleExecutor(self.kernel, boundary)
        self._worker = ObservationWorker(self._observe, self._dropped, observation_capacity)
        self._finalizer = weakref.finalize(self, self._worker.close, CLOSE_TIMEOUT)

    def __enter__(self) -> AxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float | None = CLOSE_TIMEOUT) -> None:
        """Wait up to ``timeout`` (None: each hook's deadline) for queued observation events."""
        if self._finalizer.detach() is not None:
            self._worker.close(timeout)

    def fire(self, event: str | AxEvent, payload: Mapping[str, Any] | None = None) -> FireResult:
        """Fire one event; ``PayloadError`` for an unknown event or a malformed payload.

        A payload beyond ``bounds`` reaches no hook: an event that can block is denied
        (cause ``input_refused``), any other runs no hook.
        """
        try:
            inp = parse_event(str(event), payload, session_id=self.session_id)
        except PayloadRefused as exc:
            return self.refused(AxEvent(str(event)), str(exc))
        return self.fire_input(inp)

    def refused(self, event: AxEvent, reason: str) -> FireResult:
        """The result of an event whose payload is beyond ``bounds``; no hook ran."""
        blocks = event in BLOCKING_EVENTS
        self.reporter.input_refused(event.value, reason, blocks=blocks)
        verdict = Verdict.DENY if blocks else Verdict.ALLOW
        result = FireResult(event, verdict, Cause.INPUT_REFUSED, reason=reason)
        if blocks:
            inp = EventInput(event, self.session_id, "")
            self._executor.report_decision(inp, result, log=self.log_decisions)
        return result

    def fire_input(self, inp: EventInput) -> FireResult:
        if inp.dropped:
            self.reporter.warn(
                AxWarningKind.PAYLOAD,
                event=inp.event.value,
                dropped=",".join(inp.dropped)[:200],
                cause="observation-only payloads carry ids, reasons and timestamps only",
            )
        if inp.skip is not None:
            result = FireResult(inp.event, Verdict.ALLOW, Cause.SKIPPED, reason=inp.skip)
        else:
            entries = tuple(self.config.entries_for(inp.event, inp.subject))
            carried = self.claude_answers and inp.spec.carried
            if inp.event in OBSERVATION_EVENTS and not carried:
                if not entries:
                    return FireResult(inp.event, Verdict.ALLOW, Cause.NO_HOOKS)
                queued = self._worker.submit(inp)
                return FireResult(
                    inp.event, Verdict.ALLOW, Cause.QUEUED if queued else Cause.DROPPED
                )

            def run(entry: AxEntry) -> HookRun:
                return self._executor.run(entry, inp)

            if inp.event not in BLOCKING_EVENTS:
                return gather(inp.event, entries, run)
            result = decide(inp.event, entries, run, interactive=self.interactive, tool=inp.tool)
        if inp.event in BLOCKING_EVENTS:
            self._executor.report_decision(inp, result, log=self.log_decisions)
        return result

    def pre_tool_use(self, tool: str, args: Mapping[str, Any]) -> FireResult:
        return self.fire(AxEvent.PRE_TOOL_USE, {"tool": tool, "args": dict(args)})

    def post_tool_use(self, tool: str, args: Mapping[str, Any], output: str) -> FireResult:
        payload = {"tool": tool, "args": dict(args), "output": output}
        return self.fire(AxEvent.POST_TOOL_USE, payload)

    def user_prompt_submit(self, prompt: str) -> FireResult:
        return self.fire(AxEvent.USER_PROMPT_SUBMIT, {"prompt": prompt})

    def _observe(self, inp: EventInput, cancel: CancelToken) -> None:
        for entry in self.config.entries_for(inp.event, inp.subject):
            self._executor.run(entry, inp, cancel)

    def _dropped(self, inp: EventInput, cause: str) -> None:
        ax_metrics.observe_dropped(self.metrics, inp.event)
        self.reporter.warn(AxWarningKind.DROPPED, event=inp.event.value, cause=cause)
