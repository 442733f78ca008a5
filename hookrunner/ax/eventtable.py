"""Every AX event, described once: one row each (pure data, in the manner of h11's state table).

A row says what the rest of the dialect needs to know about an event, and
nothing else in ``hookrunner.ax`` branches on an event's name:
* ``blocks`` and ``output``: whether it can stop what the agent does, and what
  a hook's exit status and output mean for it (``Output``): a decision, feedback
  appended to the tool result, a notice for the user, or nothing at all
  (observation-only: fire and forget, the decoder is never consulted);
* ``tool``: whether it concerns one tool call (matched by tool name, with the
  tool fields ``TOOL_FIELDS``); an event without a tool matches ``""``/``"*"`` only;
* ``fields``: its own payload fields, each with its AX Code and Claude Code
  name, its form, whether it is required and what a claude-code hook reads
  when the caller sent none; observation-only events share
  ``events.OBSERVATION_KEYS`` (ids, reasons, paths, timestamps) instead;
* ``legacy_args``: the fields a legacy hook reads on stdin instead of the
  payload's ``args``; ``context``: exit-0 text is context for the model;
  ``ask``: what a hook's ask becomes; ``skip``: the field that makes the
  event not fire; ``feedback``: where its hooks' text goes (for the docs);
* ``subject``: for an event without a tool, the payload field its matcher is
  matched against, as Claude Code does (``SessionStart``'s ``source``:
  ``startup|resume|clear|compact``; ``PreCompact``'s ``trigger``); ``carried``:
  an observation-only event whose claude-code hooks' answer Claude Code reads
  (``SessionStart``'s context): as Claude Code's installed hook (``fire
  --claude-json``) the runner runs them before it answers and carries the answer.

Adding an event is one ``AxEvent`` member and one row here (plus the schema's
``event`` enum and docs/hooks.md); ``tests/hookrunner/ax/test_eventtable.py``
fails when a member has no row, a row is incomplete or contradicts itself, or
the schema or the docs do not name the event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class AxEvent(StrEnum):
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    POST_TOOL_USE_FAILURE = "PostToolUseFailure"
    STOP = "Stop"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    PRE_COMPACT = "PreCompact"
    SUBAGENT_STOP = "SubagentStop"
    SESSION_START = "SessionStart"
    SESSION_END = "SessionEnd"
    POST_COMPACT = "PostCompact"
    INTERRUPT = "Interrupt"


class Output(StrEnum):
    """What a hook's exit status and output mean for its event."""

    DECISION = "decision"  # block / ask / continue (exit 2, permissionDecision, ...)
    FEEDBACK = "feedback"  # text appended to the tool result in <hook_feedback>; never blocks
    NOTICE = "notice"  # text for the user; a request to block is ignored with a warning
    IGNORED = "ignored"  # observation-only: never decoded, never delays the caller


class Form(StrEnum):
    STRING = "string"
    BOOLEAN = "boolean"
    OBJECT = "object"
    JSON = "json"  # any JSON value


@dataclass(frozen=True)
class Field:
    """One payload field: AX Code's name, Claude Code's ("" when claude-code hooks never see it)."""

    ax: str
    claude: str
    form: Form
    required: bool = False
    # What a claude-code hook reads when the caller sent nothing: a value, a function
    # of the event's arguments, or the name of another field ("=output") to fall back on.
    default: Any = None


def _trigger(args: Mapping[str, Any]) -> str:
    given = args.get("trigger")
    if isinstance(given, str):
        return given
    return "auto" if args.get("auto") is True else "manual"


@dataclass(frozen=True)
class EventSpec:
    event: AxEvent
    blocks: bool
    output: Output
    tool: bool
    fields: tuple[Field, ...]
    feedback: str  # where its hooks' text goes, one line for the docs
    claude_code: str  # how Claude Code documents the event (for the docs)
    legacy_args: tuple[str, ...] = ()
    context: bool = False  # exit-0 plain stdout / additionalContext is context for the model
    ask: str = ""  # "ask": the verdict (or a headless deny); "block": always a block
    skip: tuple[str, str] | None = None  # (field, reason): a true value means "does not fire"
    subject: str = ""  # no tool: the payload field a matcher is matched against ("" none)
    carried: bool = False  # observation-only, but Claude Code reads its hooks' answer (D391)

    def __post_init__(self) -> None:
        if self.blocks != (self.output is Output.DECISION):
            raise ValueError(f"{self.event}: only an event whose output is a decision blocks")
        if self.blocks != bool(self.ask):
            raise ValueError(f"{self.event}: an event that blocks says what an ask becomes")
        if self.output is Output.IGNORED and self.fields:
            raise ValueError(f"{self.event}: observation-only events keep ids only")
        if self.subject and self.tool:
            raise ValueError(f"{self.event}: an event with a tool is matched by its tool")
        if self.carried and self.output is not Output.IGNORED:
            raise ValueError(f"{self.event}: only an observation-only event is carried apart")
        if not self.feedback.strip() or not self.claude_code.strip():
            raise ValueError(f"{self.event}: the row needs its feedback and Claude Code notes")


# The fields of every event with a tool (AX Code name, Claude Code name).
TOOL_FIELDS = (
    Field("tool", "tool_name", Form.STRING, required=True),
    Field("args", "tool_input", Form.OBJECT, default={}),
    Field("tool_call_id", "tool_use_id", Form.STRING),
)
_STOP_FIELDS = (Field("stop_hook_active", "stop_hook_active", Form.BOOLEAN, default=False),)
_OBSERVED = "none: observation-only, fire and forget (exit status and output ignored)"


def _observed(
    event: AxEvent,
    claude_code: str,
    *,
    tool: bool = False,
    skip: tuple[str, str] | None = None,
    subject: str = "",
    carried: bool = False,
) -> EventSpec:
    """The row of an observation-only event: it never blocks and keeps ids only."""
    return EventSpec(
        event,
        False,
        Output.IGNORED,
        tool,
        (),
        _OBSERVED,
        claude_code,
        skip=skip,
        subject=subject,
        carried=carried,
    )


EVENTS: Mapping[AxEvent, EventSpec] = {
    spec.event: spec
    for spec in (
        EventSpec(
            AxEvent.PRE_TOOL_USE,
            blocks=True,
            output=Output.DECISION,
            tool=True,
            fields=(),
            feedback="the block or ask reason is what the model sees",
            claude_code="PreToolUse: tool_name, tool_input, tool_use_id",
            ask="ask",
        ),
        EventSpec(
            AxEvent.USER_PROMPT_SUBMIT,
            blocks=True,
            output=Output.DECISION,
            tool=False,
            fields=(
                Field("prompt", "prompt", Form.STRING, required=True),
                Field("synthetic", "", Form.BOOLEAN),
            ),
            feedback="the block reason; exit-0 text and additionalContext are context",
            claude_code="UserPromptSubmit: prompt",
            legacy_args=("prompt",),
            context=True,
            ask="block",
            skip=("synthetic", "synthetic continuation prompts do not fire UserPromptSubmit"),
        ),
        EventSpec(
            AxEvent.POST_TOOL_USE,
            blocks=False,
            output=Output.FEEDBACK,
            tool=True,
            fields=(
                Field("output", "", Form.STRING),
                Field("tool_response", "tool_response", Form.JSON, default="=output"),
            ),
            feedback="a <hook_feedback> block after the tool result",
            claude_code="PostToolUse: tool_name, tool_input, tool_use_id, tool_response",
        ),
        EventSpec(
            AxEvent.STOP,
            blocks=False,
            output=Output.NOTICE,
            tool=False,
            fields=_STOP_FIELDS,
            feedback="notices for the user",
            claude_code="Stop: stop_hook_active (Claude Code lets it block; here it cannot)",
        ),
        EventSpec(
            AxEvent.SUBAGENT_STOP,
            blocks=False,
            output=Output.NOTICE,
            tool=False,
            fields=_STOP_FIELDS,
            feedback="notices for the user",
            claude_code="SubagentStop: stop_hook_active, agent_id, agent_type",
        ),
        EventSpec(
            AxEvent.PRE_COMPACT,
            blocks=False,
            output=Output.NOTICE,
            tool=False,
            fields=(
                Field("trigger", "trigger", Form.STRING, default=_trigger),
                Field("custom_instructions", "custom_instructions", Form.STRING, default=""),
            ),
            feedback="notices for the user",
            claude_code="PreCompact: trigger (manual/auto), custom_instructions",
            subject="trigger",
        ),
        _observed(
            AxEvent.POST_TOOL_USE_FAILURE,
            "PostToolUseFailure: tool_name, tool_input, tool_use_id, error "
            "(tool_input and error dropped here)",
            tool=True,
        ),
        _observed(
            AxEvent.SESSION_START,
            "SessionStart: source, model",
            skip=(
                "parent_session_id",
                "subagent sessions do not fire SessionStart (they surface through SubagentStop)",
            ),
            subject="source",
            carried=True,
        ),
        _observed(AxEvent.SESSION_END, "SessionEnd: reason", subject="reason"),
        _observed(AxEvent.POST_COMPACT, "PostCompact: trigger (summary dropped here)"),
        _observed(AxEvent.INTERRUPT, "not a Claude Code event (AX Code's)"),
    )
}


def spec_of(event: AxEvent) -> EventSpec:
    return EVENTS[event]


def events_where(predicate: Callable[[EventSpec], bool]) -> frozenset[AxEvent]:
    return frozenset(spec.event for spec in EVENTS.values() if predicate(spec))


BLOCKING_EVENTS = events_where(lambda spec: spec.blocks)
OBSERVATION_EVENTS = events_where(lambda spec: spec.output is Output.IGNORED)
TOOL_EVENTS = events_where(lambda spec: spec.tool)
