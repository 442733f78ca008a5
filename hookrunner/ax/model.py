"""Immutable values of the AX Code dialect: events, entries, causes, results.

What one hook run came to is the kernel's ``outcome.Outcome`` (the ``outcome``
label of ``hook_runs_total``, shared with hooks.json); ``Cause`` is the closed set of
reasons for the decision of one fired event (logged on every decision line,
the ``cause`` label of ``hook_lifecycle_decisions_total``). Both are
documented in docs/hooks.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Re-exported: the event table (``eventtable``) is where events are described.
from sandbox_egress.hookrunner.ax.eventtable import BLOCKING_EVENTS as BLOCKING_EVENTS
from sandbox_egress.hookrunner.ax.eventtable import OBSERVATION_EVENTS as OBSERVATION_EVENTS
from sandbox_egress.hookrunner.ax.eventtable import TOOL_EVENTS as TOOL_EVENTS
from sandbox_egress.hookrunner.ax.eventtable import AxEvent as AxEvent
from sandbox_egress.hookrunner.ax.matcher import AxMatcher
from sandbox_egress.hookrunner.model import Problem
from sandbox_egress.hookrunner.outcome import Outcome


class Protocol(StrEnum):
    LEGACY = "legacy"  # no "protocol" key: blockOnFailure semantics
    CLAUDE_CODE = "claude-code"


class AxWarningKind(StrEnum):
    """This dialect's warning kinds, next to the kernel's ``report.WarningKind``."""

    FAIL_SAFE = "fail_safe"  # a hook failed or printed a malformed answer; the action was blocked
    HOOK_FAILURE = "hook_failure"  # a hook of an event that cannot block failed
    PAYLOAD = "payload"  # fields of an observation-only payload were dropped (names only)
    DROPPED = "dropped"  # an observation-only event could not be run


class Effect(StrEnum):
    """What one hook run asks of its event."""

    CONTINUE = "continue"
    BLOCK = "block"
    ASK = "ask"


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"  # only with an interactive channel, only for PreToolUse


class Cause(StrEnum):
    NO_HOOKS = "no_hooks"  # no entry matched
    ALLOWED = "allowed"  # every hook that ran let it through
    NON_BLOCKING = "non_blocking"  # an event that cannot block ran its hooks
    QUEUED = "queued"  # an observation-only event was handed to the session's worker
    DROPPED = "dropped"  # an observation-only event could not be queued (full or closed)
    SKIPPED = "skipped"  # a subagent's SessionStart, a synthetic prompt: does not fire
    BLOCK_ON_FAILURE = "block_on_failure"  # a legacy entry with blockOnFailure failed
    EXIT_2 = "exit_2"  # a claude-code entry exited with status 2
    PERMISSION_DENY = "permission_deny"  # permissionDecision "deny"
    DECISION_BLOCK = "decision_block"  # {"decision": "block"}
    CONTINUE_FALSE = "continue_false"  # {"continue": false}
    MALFORMED_OUTPUT = "malformed_output"  # exit 0 with stdout that is not a valid answer
    ASK = "ask"  # permissionDecision "ask", handed to the interactive channel
    ASK_HEADLESS = "ask_headless"  # ask refused: no interactive channel
    ASK_ON_PROMPT = "ask_on_prompt"  # ask on UserPromptSubmit: there is no call to confirm
    INPUT_REFUSED = "input_refused"  # the payload is beyond ``bounds``: no hook saw it


@dataclass(frozen=True)
class HttpTarget:
    """An ``http`` handler of a settings file: POSTed through the egress proxy."""

    url: str
    headers: tuple[tuple[str, str], ...]  # values may hold $VAR / ${VAR}
    allowed_env: tuple[str, ...]  # allowedEnvVars: the only variables interpolated


@dataclass(frozen=True)
class AxEntry:
    """One hook to run: a custom ``hooks`` entry or one hook of a pack."""

    event: AxEvent
    matcher: AxMatcher
    command: str
    block_on_failure: bool
    protocol: Protocol
    timeout: int
    pack: str  # HOOK_PACK: the pack name, "" for a custom entry without "pack"
    source: str  # what warnings and decisions name: the pack, or "hooks[3]"
    where: str  # file and JSON path
    http: HttpTarget | None = None  # an http handler (settings files); command is then ""


@dataclass(frozen=True)
class AxConfig:
    """The snapshot of every loaded AX hooks file, taken when the session opens."""

    entries: tuple[AxEntry, ...]
    problems: tuple[Problem, ...]
    files: tuple[str, ...]
    notices: tuple[str, ...] = ()  # why a file was not loaded (trust), for one warning each

    def entries_for(self, event: AxEvent, tool: str) -> Iterator[AxEntry]:
        for entry in self.entries:
            if entry.event is event and entry.matcher.matches(tool):
                yield entry


@dataclass(frozen=True)
class HookRun:
    """The result of running one entry once."""

    entry: AxEntry
    outcome: Outcome
    effect: Effect
    detail: str  # the cause, for warnings; never contains environment values
    duration: float
    reason: str | None = None  # block or ask reason
    cause: Cause | None = None  # with BLOCK and ASK
    feedback: str | None = None  # PostToolUse text for the model (already bounded per hook)
    notice: str | None = None  # Stop / SubagentStop / PreCompact text for the user
    failed: bool = False  # worth a warning line
    context: str | None = None  # UserPromptSubmit: text added to the model's context
    asked_block: bool = False  # a Stop-like hook asked to block (ignored; Claude Code honours it)
    # What a claude-code hook's answer asks of Claude Code beyond the decision, passed on as
    # it is by ``fire --claude-json`` (``ax.claudeout``, D390): updatedInput, systemMessage...
    carried: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FireResult:
    """The decision of one fired event, with the PostToolUse feedback block."""

    event: AxEvent
    decision: Verdict
    cause: Cause
    reason: str | None = None
    source: str | None = None  # the entry that decided a deny or ask
    feedback: str | None = None  # the whole <hook_feedback> block, or None
    notices: tuple[str, ...] = ()
    runs: tuple[HookRun, ...] = ()
    context: str | None = None  # UserPromptSubmit: what the hooks add to the model's context
    carried: Mapping[str, Any] = field(default_factory=dict)  # the hooks' ``HookRun.carried``

    @property
    def allowed(self) -> bool:
        return self.decision is Verdict.ALLOW

    def with_feedback(self, output: str) -> str:
        """The tool result the model sees: the output, then the feedback block after it."""
        return output if self.feedback is None else f"{output}\n\n{self.feedback}"

    def to_json(self, output: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "event": self.event.value,
            "decision": self.decision.value,
            "cause": self.cause.value,
        }
        if self.reason is not None:
            body["reason"] = self.reason
        if self.source is not None:
            body["source"] = self.source
        if self.feedback is not None:
            body["feedback"] = self.feedback
            if output is not None:
                body["tool_result"] = self.with_feedback(output)
        if self.context is not None:
            body["context"] = self.context
        if self.notices:
            body["notices"] = list(self.notices)
        return body
