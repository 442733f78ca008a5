"""Tool names and tool arguments of AX Code and Claude Code, and how they correspond (pure).

AX Code names its tools in lower case (``bash``, ``edit``); Claude Code in
CamelCase (``Bash``, ``Edit``). The runner treats the two names of one tool
as the same tool (docs/hooks.md, "Tool names and matchers"):
* a matcher alternative matches a tool call when it matches either name
  (``"Bash"`` fires for a call of ``bash``, ``"bash"`` for ``Bash``);
* a claude-code entry always reads Claude Code's names: a call of AX Code's
  ``edit`` with ``filePath`` reaches it as ``tool_name: "Edit"`` with
  ``tool_input.file_path``. Only the keys in ``INPUT_KEYS`` are renamed; every
  other argument is passed unchanged;
* a tool that is in neither list (``mcp__github__create_issue``, this
  runner's ``read_file``) keeps its one name and its arguments unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# AX Code tool id -> Claude Code tool name.
CLAUDE_CODE_TOOLS: Mapping[str, str] = {
    "bash": "Bash",
    "edit": "Edit",
    "multiedit": "MultiEdit",
    "write": "Write",
    "read": "Read",
    "glob": "Glob",
    "grep": "Grep",
    "webfetch": "WebFetch",
    "websearch": "WebSearch",
    "task": "Task",
    "todowrite": "TodoWrite",
    "notebookedit": "NotebookEdit",
}
AX_TOOLS: Mapping[str, str] = {cc: ax for ax, cc in CLAUDE_CODE_TOOLS.items()}
# AX Code argument name -> Claude Code argument name (the rest are spelt the same).
INPUT_KEYS: Mapping[str, str] = {
    "filePath": "file_path",
    "oldString": "old_string",
    "newString": "new_string",
    "replaceAll": "replace_all",
}


def claude_code_name(tool: str) -> str:
    return CLAUDE_CODE_TOOLS.get(tool, tool)


def names_of(tool: str) -> tuple[str, ...]:
    """The names one tool call is matched by: its own, and its other vocabulary's."""
    other = CLAUDE_CODE_TOOLS.get(tool) or AX_TOOLS.get(tool)
    return (tool,) if other is None else (tool, other)


def claude_code_input(tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """``tool_input`` for a claude-code hook: AX Code's argument names renamed, the rest as is."""
    if tool not in CLAUDE_CODE_TOOLS:
        return dict(args)
    return {INPUT_KEYS.get(key, key): _rename(value) for key, value in args.items()}


def _rename(value: Any) -> Any:
    if isinstance(value, list):  # multiedit's "edits": [{"oldString": ...}, ...]
        return [
            {INPUT_KEYS.get(k, k): v for k, v in item.items()} if isinstance(item, dict) else item
            for item in value
        ]
    return value
