"""Event payloads: what a caller fires, and what each hook receives (pure).

Payloads are open (docs/hooks.md, "Payloads"). The caller's payload is read
once, here, into an ``EventInput``; only the fields the runner needs are
checked, in either shape — AX Code's or Claude Code's (``tool``/``tool_name``,
``args``/``tool_input``, ``tool_call_id``/``tool_use_id``,
``output``/``tool_response``; both names given with different values is an
error). Every other field is kept in ``extra`` and reaches claude-code
entries unchanged. A wrong type of a needed field is a ``PayloadError``; a
payload beyond ``bounds`` is ``bounds.PayloadRefused``.
* which fields an event reads is its row of ``eventtable``: tool events need a
  tool name (``TOOL_FIELDS``), then the row's own ``fields`` (``prompt`` of
  ``UserPromptSubmit`` is required, ``stop_hook_active`` of ``Stop``...), each
  checked for its form under either name; a ``hook_event_name`` must name the
  event fired;
* observation-only events keep **only** ids, reasons, paths and timestamps:
  the keys of ``OBSERVATION_KEYS`` with a value of the right form (source
  page: never conversation text, summaries or tool output). Anything else is
  dropped, never an error, and the dropped key names are reported;
* an event whose row has ``skip`` does not fire when that field is true: a
  ``SessionStart`` with a ``parent_session_id`` (a subagent's session) and a
  ``UserPromptSubmit`` with ``"synthetic": true`` (source page).

What each hook receives is built from the ``EventInput`` in ``envelope``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.common.clock import utc_timestamp
from sandbox_egress.hookrunner.ax.eventtable import AxEvent, EventSpec, Form, Output, spec_of
from sandbox_egress.hookrunner.ax.vocabulary import claude_code_input, claude_code_name
from sandbox_egress.hookrunner.enforce import bounds
from sandbox_egress.hookrunner.errors import PayloadError

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+\-]{0,127}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
_PATH = re.compile(r"/[^\x00-\x1f\x7f]{0,4095}")
_BOOLEAN = object()
# Observation-only keys and the form of their values; tool keys only for PostToolUseFailure.
OBSERVATION_KEYS: Mapping[str, Any] = {
    "session_id": _TOKEN,
    "parent_session_id": _TOKEN,
    "subagent_session_id": _TOKEN,
    "message_id": _TOKEN,
    "tool": _TOKEN,
    "tool_call_id": _TOKEN,
    "reason": _TOKEN,
    "source": _TOKEN,
    "trigger": _TOKEN,
    "timestamp": _TIMESTAMP,
    "permission_mode": _TOKEN,  # Claude Code's common fields
    "transcript_path": _PATH,
    "cwd": _PATH,
    "model": _TOKEN,
    "agent_id": _TOKEN,
    "agent_type": _TOKEN,
    "is_interrupt": _BOOLEAN,
}
# Claude Code's name -> the name used here.
_OBSERVATION_ALIASES = {"tool_name": "tool", "tool_use_id": "tool_call_id"}
_TOOL_KEYS = ("tool", "tool_call_id")


def now_timestamp() -> str:
    return utc_timestamp()


@dataclass(frozen=True)
class EventInput:
    event: AxEvent
    session_id: str
    timestamp: str
    tool: str = ""  # HOOK_TOOL, as the caller named it; "" for events without a tool
    args: Mapping[str, Any] = field(default_factory=dict)  # HOOK_ARGS_JSON / legacy stdin
    output: str | None = None  # PostToolUse: the tool result (text) the feedback follows
    fields: Mapping[str, Any] = field(default_factory=dict)  # ids (observation-only: all kept)
    skip: str | None = None  # why this event does not fire
    dropped: tuple[str, ...] = ()  # observation-only: keys that were not ids/reasons/timestamps
    extra: Mapping[str, Any] = field(default_factory=dict)  # fields passed on unchanged
    claude_tool: str = ""  # tool_name for claude-code entries
    claude_input: Mapping[str, Any] = field(default_factory=dict)  # tool_input for them
    values: Mapping[str, Any] = field(default_factory=dict)  # the row's own fields, as given

    @property
    def spec(self) -> EventSpec:
        return spec_of(self.event)

    @property
    def subject(self) -> str:
        """What a matcher is matched against: the tool, else the row's ``subject`` field
        (``SessionStart``'s ``source``), as Claude Code matches it; "" when there is none."""
        if self.spec.tool:
            return self.tool
        name = self.spec.subject
        value = self.fields.get(name, self.values.get(name)) if name else None
        return value if isinstance(value, str) else ""


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
    bounds.check(document)  # what every hook receives is made of it
    given = document.get("session_id", session_id)
    if not isinstance(given, str):
        raise PayloadError('"session_id" must be a string')
    named = document.get("hook_event_name", event.value)
    if named != event.value:
        raise PayloadError(f'"hook_event_name" is {json.dumps(named)[:60]}, not {event.value!r}')
    if spec_of(event).output is Output.IGNORED:
        return _observation(event, document, given, clock())
    return _acting(event, document, given, clock())


def _acting(
    event: AxEvent, document: Mapping[str, Any], session_id: str, timestamp: str
) -> EventInput:
    """An event whose hooks' output counts: the tool fields, then the row's own fields."""
    spec = spec_of(event)
    used = {"session_id", "hook_event_name"}
    tool = claude_tool = ""
    args: Mapping[str, Any] = {}
    claude_input: Mapping[str, Any] = {}
    fields: dict[str, Any] = {}
    if spec.tool:
        key, tool = _alias(document, "tool", "tool_name", used)
        if not isinstance(tool, str) or not tool:
            raise PayloadError(f'"{key}" must be a non-empty string')
        args_key, given_args = _alias(document, "args", "tool_input", used)
        args = _object(args_key, {} if given_args is None else given_args)
        claude_tool = tool if key == "tool_name" else claude_code_name(tool)
        claude_input = dict(args) if args_key == "tool_input" else claude_code_input(tool, args)
        call_key, call_id = _alias(document, "tool_call_id", "tool_use_id", used)
        if _string(call_key, call_id):
            fields["tool_call_id"] = call_id
    else:
        used.add("args")
        args = _object("args", document.get("args", {}))
    values: dict[str, Any] = {}
    for declared in spec.fields:
        names = {declared.ax, declared.claude} - {""}
        used |= names
        key, value = _alias(document, declared.ax, declared.claude or declared.ax, used)
        if value is None:
            if declared.required:
                raise PayloadError(f'"{key}" must be {_FORM_WORDS[declared.form]}')
            continue
        values[declared.ax] = _checked(key, declared.form, value)
    if spec.legacy_args:
        args = {name: values[name] for name in spec.legacy_args if name in values}
    output = values.get("output")
    response = values.get("tool_response")
    if output is None and response is not None:
        output = response if isinstance(response, str) else _compact(response)
    skip = spec.skip[1] if spec.skip is not None and values.get(spec.skip[0]) else None
    extra = {k: v for k, v in document.items() if k not in used}
    return EventInput(
        event,
        session_id,
        timestamp,
        tool,
        dict(args),
        output,
        fields,
        skip,
        extra=extra,
        claude_tool=claude_tool,
        claude_input=claude_input,
        values=values,
    )


_FORM_WORDS = {
    Form.STRING: "a string",
    Form.BOOLEAN: "a boolean",
    Form.OBJECT: "an object",
    Form.JSON: "JSON",
}


def _checked(key: str, form: Form, value: Any) -> Any:
    if form is Form.OBJECT:
        return dict(_object(key, value))
    if form is Form.JSON:
        _compact(value, key)
        return value
    wanted = str if form is Form.STRING else bool
    if not isinstance(value, wanted):
        raise PayloadError(f'"{key}" must be {_FORM_WORDS[form]}')
    return value


def _alias(document: Mapping[str, Any], ax: str, claude: str, used: set[str]) -> tuple[str, Any]:
    """(the key given, its value) of a field that has an AX and a Claude Code name."""
    used |= {ax, claude}
    if ax in document and claude in document and document[ax] != document[claude]:
        raise PayloadError(f'"{ax}" and "{claude}" are the same field and disagree')
    if claude in document and ax not in document:
        return claude, document[claude]
    return ax, document.get(ax)


def _object(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PayloadError(f'"{key}" must be an object')
    try:
        json.dumps(dict(value))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f'"{key}" is not JSON: {exc}') from None
    return value


def _string(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise PayloadError(f'"{key}" must be a string')
    return value


def _compact(value: Any, key: str = "tool_response") -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f'"{key}" is not JSON: {exc}') from None


def _observation(
    event: AxEvent, document: Mapping[str, Any], session_id: str, timestamp: str
) -> EventInput:
    spec = spec_of(event)
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for given_key, value in document.items():
        if given_key in ("session_id", "hook_event_name"):
            continue
        key = _OBSERVATION_ALIASES.get(given_key, given_key)
        form = OBSERVATION_KEYS.get(key)
        wanted = form is not None and (key not in _TOOL_KEYS or spec.tool)
        if wanted and _fits(form, value) and kept.get(key, value) == value:
            kept[key] = value
        else:
            dropped.append(str(given_key)[:40])
    if session_id and not _TOKEN.fullmatch(session_id):
        dropped.append("session_id")
        session_id = ""
    skip = spec.skip[1] if spec.skip is not None and kept.get(spec.skip[0]) else None
    tool = kept.pop("tool", "") if spec.tool else ""
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
        claude_tool=claude_code_name(tool),
    )


def _fits(form: Any, value: Any) -> bool:
    if form is _BOOLEAN:
        return isinstance(value, bool)
    return isinstance(value, str) and form.fullmatch(value) is not None
