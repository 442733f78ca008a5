"""What each hook receives on stdin for one ``EventInput`` (pure).

* legacy entries get ``args_document``: the tool's arguments (or the event's
  fields), compact JSON, the same text as ``HOOK_ARGS_JSON`` when that is not
  empty (source page: the full arguments are always on stdin);
* claude-code entries get ``claude_code_document``: Claude Code's input
  envelope. Every field of the caller's payload the runner does not read
  comes first, unchanged; then Claude Code's names for what it does read
  (``tool_name`` and ``tool_input`` in Claude Code's vocabulary,
  ``tool_use_id``, ``tool_response``, ``stop_hook_active``...);
* observation-only events carry ids, reasons, paths and timestamps only, in
  both forms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hookrunner.ax.events import EventInput
from hookrunner.ax.model import OBSERVATION_EVENTS, TOOL_EVENTS, AxEvent


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
    if inp.event in OBSERVATION_EVENTS:
        body: dict[str, Any] = {"session_id": inp.session_id, "hook_event_name": inp.event.value}
        for key, value in inp.fields.items():
            body["tool_use_id" if key == "tool_call_id" else key] = value
        if inp.tool:
            body["tool_name"] = inp.claude_tool
        body["timestamp"] = inp.timestamp
        return body
    body = dict(inp.extra)  # every field the runner does not read, unchanged
    body["session_id"] = inp.session_id
    body["hook_event_name"] = inp.event.value
    body.setdefault("cwd", cwd)
    if inp.event in TOOL_EVENTS:
        body["tool_name"] = inp.claude_tool
        body["tool_input"] = dict(inp.claude_input)
        if "tool_call_id" in inp.fields:
            body["tool_use_id"] = inp.fields["tool_call_id"]
    if inp.event is AxEvent.POST_TOOL_USE:
        response = inp.tool_response if inp.tool_response is not None else inp.output
        body["tool_response"] = response if response is not None else ""
    if inp.event is AxEvent.USER_PROMPT_SUBMIT:
        body["prompt"] = inp.prompt
    if inp.event in (AxEvent.STOP, AxEvent.SUBAGENT_STOP):
        body["stop_hook_active"] = inp.stop_hook_active
    if inp.event is AxEvent.PRE_COMPACT:
        auto = inp.args.get("auto") is True
        trigger = inp.extra.get("trigger", inp.args.get("trigger"))
        body["trigger"] = trigger if isinstance(trigger, str) else ("auto" if auto else "manual")
        body.setdefault("custom_instructions", "")
    if inp.event in (AxEvent.STOP, AxEvent.SUBAGENT_STOP, AxEvent.PRE_COMPACT) and inp.args:
        body["args"] = dict(inp.args)  # AX Code's arguments of the event, when it has any
    body.setdefault("timestamp", inp.timestamp)
    return body
