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

from sandbox_egress.hookrunner.ax.events import EventInput
from sandbox_egress.hookrunner.ax.eventtable import Field, Output


def args_document(inp: EventInput) -> Mapping[str, Any]:
    """HOOK_ARGS_JSON and a legacy hook's stdin: the tool's arguments, or the event's fields."""
    if inp.spec.output is Output.IGNORED:
        body: dict[str, Any] = {"session_id": inp.session_id, **inp.fields}
        if inp.tool:
            body["tool"] = inp.tool
        body["timestamp"] = inp.timestamp
        return body
    return inp.args


def claude_code_document(inp: EventInput, cwd: str) -> dict[str, Any]:
    """The stdin of a claude-code entry: Claude Code's hook input envelope."""
    spec = inp.spec
    if spec.output is Output.IGNORED:
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
    if spec.tool:
        body["tool_name"] = inp.claude_tool
        body["tool_input"] = dict(inp.claude_input)
        if "tool_call_id" in inp.fields:
            body["tool_use_id"] = inp.fields["tool_call_id"]
    for declared in spec.fields:
        if declared.claude:
            value = _value(inp, declared)
            if value is not None:
                body[declared.claude] = value
    if not spec.tool and not spec.legacy_args and inp.args:
        body["args"] = dict(inp.args)  # AX Code's arguments of the event, when it has any
    body.setdefault("timestamp", inp.timestamp)
    return body


def _value(inp: EventInput, declared: Field) -> Any:
    """The field as the caller gave it, else the row's default for a claude-code hook."""
    if declared.ax in inp.values:
        return inp.values[declared.ax]
    default = declared.default
    if isinstance(default, str) and default.startswith("="):
        fallback = inp.values.get(default[1:])
        return fallback if fallback is not None else ""
    return default(inp.args) if callable(default) else default
