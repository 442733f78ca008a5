"""Event payloads: what a caller fires, and what each hook receives (pure).

The caller's payload is checked once, here, into an ``EventInput``:
* tool events (``PreToolUse``, ``PostToolUse``) need ``tool``; ``args`` is the
  tool's arguments; ``PostToolUse`` may carry ``output`` (the tool result the
  feedback block is appended to); ``UserPromptSubmit`` needs ``prompt``;
  ``Stop``, ``SubagentStop`` and ``PreCompact`` take optional ``args``;
  an unknown key or a wrong type is a ``PayloadError``;
* observation-only events keep **only** ids, reasons and timestamps: the keys
  of ``OBSERVATION_KEYS`` whose value is a short token. Anything else (text,
  summaries, tool output, arguments) is dropped, never an error, and the
  dropped key names are reported;
* a ``SessionStart`` with a ``parent_session_id`` (a subagent's session) and a
  ``UserPromptSubmit`` with ``"synthetic": true`` do not fire (source page).

What a hook receives: legacy entries get ``args_document`` on stdin (compact
JSON, the same text as ``HOOK_ARGS_JSON`` when that is not empty); claude-code
entries get ``claude_code_document``, the envelope Claude Code hooks read
(``session_id``, ``hook_event_name``, ``tool_name``, ``tool_input``...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hookrunner.ax.model import OBSERVATION_EVENTS, TOOL_EVENTS, AxEvent
from hookrunner.errors import PayloadError

OBSERVATION_KEYS = frozenset(
    {
        "session_id",
        "parent_session_id",
        "subagent_session_id",
        "message_id",
        "tool",
        "tool_call_id",
        "reason",
        "source",
        "trigger",
        "timestamp",
    }
)
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+\-]{0,127}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
_COMMON_KEYS = frozenset({"session_id"})
_KEYS = {
    AxEvent.PRE_TOOL_USE: frozenset({"tool", "args", "tool_call_id"}),
    AxEvent.POST_TOOL_USE: frozenset({"tool", "args", "output", "tool_call_id"}),
    AxEvent.USER_PROMPT_SUBMIT: frozenset({"prompt", "synthetic"}),
    AxEvent.STOP: frozenset({"args"}),
    AxEvent.SUBAGENT_STOP: frozenset({"args"}),
    AxEvent.PRE_COMPACT: frozenset({"args"}),
}


def now_timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class EventInput:
    event: AxEvent
    session_id: str
    timestamp: str
    tool: str = ""  # HOOK_TOOL; "" for events without a tool
    args: Mapping[str, Any] = field(default_factory=dict)  # HOOK_ARGS_JSON / legacy stdin
    output: str | None = None  # PostToolUse: the tool result
    prompt: str | None = None  # UserPromptSubmit
    fields: Mapping[str, str] = field(default_factory=dict)  # ids (observation-only: all kept)
    skip: str | None = None  # why this event does not fire
    dropped: tuple[str, ...] = ()  # observation-only: keys that were not ids/reasons/timestamps


def parse_event(
    event_name: str,
    document: Any,
    *,
    session_id: str = "",
    clock: Callable[[], str] = now_timestamp,
) -> EventInput:
    try:
        event = AxEvent(event_name)
    except ValueError:
        raise PayloadError(
            f"unknown event {event_name!r}; one of {', '.join(e.value for e in AxEvent)}"
        ) from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise PayloadError("the payload must be a JSON object")
    given = document.get("session_id", session_id)
    if not isinstance(given, str):
        raise PayloadError('"session_id" must be a string')
    if event in OBSERVATION_EVENTS:
        return _observation(event, document, given, clock())
    allowed = _KEYS[event] | _COMMON_KEYS
    for key in document:
        if key not in allowed:
            raise PayloadError(
                f"{event.value} takes no {key!r} (it takes {', '.join(sorted(allowed))})"
            )
    tool = ""
    if event in TOOL_EVENTS:
        given_tool = document.get("tool")
        if not isinstance(given_tool, str) or not given_tool:
            raise PayloadError('"tool" must be a non-empty string')
        tool = given_tool
    args = document.get("args", {})
    if not isinstance(args, Mapping):
        raise PayloadError('"args" must be an object')
    try:
        json.dumps(dict(args))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f'"args" is not JSON: {exc}') from None
    output = _optional_string(document, "output")
    call_id = _optional_string(document, "tool_call_id")
    prompt = None
    skip = None
    if event is AxEvent.USER_PROMPT_SUBMIT:
        prompt = _optional_string(document, "prompt")
        if prompt is None:
            raise PayloadError('"prompt" must be a string')
        synthetic = document.get("synthetic", False)
        if not isinstance(synthetic, bool):
            raise PayloadError('"synthetic" must be a boolean')
        args = {"prompt": prompt}
        if synthetic:
            skip = "synthetic continuation prompts do not fire UserPromptSubmit"
    fields = {"tool_call_id": call_id} if call_id else {}
    return EventInput(event, given, clock(), tool, dict(args), output, prompt, fields, skip)


def _optional_string(document: Mapping[str, Any], key: str) -> str | None:
    value = document.get(key)
    if value is not None and not isinstance(value, str):
        raise PayloadError(f'"{key}" must be a string')
    return value


def _observation(
    event: AxEvent, document: Mapping[str, Any], session_id: str, timestamp: str
) -> EventInput:
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in document.items():
        if key == "session_id":
            continue
        wanted = key in OBSERVATION_KEYS and (key != "tool" or event in TOOL_EVENTS)
        if wanted and isinstance(value, str) and _fits(key, value):
            kept[key] = value
        else:
            dropped.append(str(key)[:40])
    if session_id and not _TOKEN.fullmatch(session_id):
        dropped.append("session_id")
        session_id = ""
    skip = None
    if event is AxEvent.SESSION_START and "parent_session_id" in kept:
        skip = "subagent sessions do not fire SessionStart (they surface through SubagentStop)"
    tool = kept.pop("tool", "") if event in TOOL_EVENTS else ""
    stamp = kept.pop("timestamp", timestamp)
    return EventInput(
        event,
        session_id,
        stamp,
        tool,
        args={},
        fields=kept,
        skip=skip,
        dropped=tuple(sorted(dropped)),
    )


def _fits(key: str, value: str) -> bool:
    pattern = _TIMESTAMP if key == "timestamp" else _TOKEN
    return pattern.fullmatch(value) is not None


def args_document(inp: EventInput) -> Mapping[str, Any]:
    """HOOK_ARGS_JSON and a legacy hook's stdin: the tool's arguments, or the event's fields."""
    if inp.event in OBSERVATION_EVENTS:
        body: dict[str, Any] = {"session_id": inp.session_id, **inp.fields}
        if inp.tool:
            body["tool"] = inp.tool
        body["timestamp"] = inp.timestamp
        return body
    return inp.args


def claude_code_document(inp: EventInput, cwd: str) -> dict[str, Any]:
    """The stdin of a claude-code entry: Claude Code's hook input envelope."""
    body: dict[str, Any] = {"session_id": inp.session_id, "hook_event_name": inp.event.value}
    if inp.event in OBSERVATION_EVENTS:
        body.update(inp.fields)
        if inp.tool:
            body["tool_name"] = inp.tool
        body["timestamp"] = inp.timestamp
        return body
    body["cwd"] = cwd
    if inp.event in TOOL_EVENTS:
        body["tool_name"] = inp.tool
        body["tool_input"] = dict(inp.args)
        if "tool_call_id" in inp.fields:
            body["tool_use_id"] = inp.fields["tool_call_id"]
    if inp.event is AxEvent.POST_TOOL_USE:
        body["tool_response"] = inp.output if inp.output is not None else ""
    if inp.event is AxEvent.USER_PROMPT_SUBMIT:
        body["prompt"] = inp.prompt
    if inp.event in (AxEvent.STOP, AxEvent.SUBAGENT_STOP):
        body["stop_hook_active"] = False
    if inp.event is AxEvent.PRE_COMPACT:
        trigger = inp.args.get("trigger")
        body["trigger"] = (
            trigger
            if isinstance(trigger, str)
            else ("auto" if inp.args.get("auto") is True else "manual")
        )
        body["custom_instructions"] = ""
    if inp.event in (AxEvent.STOP, AxEvent.SUBAGENT_STOP, AxEvent.PRE_COMPACT):
        body["args"] = dict(inp.args)
    body["timestamp"] = inp.timestamp
    return body
