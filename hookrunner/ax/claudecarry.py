"""What ``hookrunner claude install`` can carry over with Claude Code's semantics (pure, D393).

Installed, the runner runs the user's hooks of every event it fires (``CLAUDE_EVENTS``)
and answers Claude Code for them (``fire --claude-json``). A hook it cannot run as
Claude Code would is named before any file changes (``install`` exits 1 and lists each
with its JSON path and why); with ``--force`` such a hook stays in the settings file,
where Claude Code keeps running it itself, and only the rest moves. Never carried:
* a handler ``type`` other than ``command`` and ``http`` (``prompt``, ``agent``...: they
  need a model) and a handler field the runner does not implement (``async``,
  ``asyncRewake``, ``once``, ``if``, ``shell``, ``statusMessage``, or one it does not
  know at all);
* a matcher on an event Claude Code matches nothing on (``Stop``, ``UserPromptSubmit``...:
  Claude Code ignores it and runs the hook; the runner would match it against "");
* every hook of ``PostToolUseFailure`` (the runner's row keeps ids only: its hooks
  would not see ``tool_input`` nor ``error``).
Events the runner does not fire (``Notification``, ``PermissionRequest``...) are not
moved at all: Claude Code runs them as before, and ``install`` says so.
"""

from __future__ import annotations

from typing import Any

from sandbox_egress.hookrunner.ax.eventtable import AxEvent, spec_of

HANDLER_FIELDS = {
    "command": frozenset({"type", "command", "timeout"}),
    "http": frozenset({"type", "url", "headers", "allowedEnvVars", "timeout"}),
}
FIELD_WHY = {
    "async": "the runner waits for every hook it runs; an async hook would hold the call",
    "asyncRewake": "the runner does not wake Claude from a background hook",
    "once": "the runner starts afresh on every call and cannot run a hook once a session",
    "if": "the runner does not evaluate Claude Code's permission-rule conditions",
    "shell": "the runner runs every command hook with /bin/sh",
    "statusMessage": "the runner's one entry per event shows no message of its own",
}
TYPE_WHY = {
    "prompt": "a prompt hook asks a model, which the runner does not have",
    "agent": "an agent hook runs a subagent, which the runner does not have",
}
NOT_CARRIED_EVENTS = {
    "PostToolUseFailure": "the runner passes PostToolUseFailure hooks ids only, "
    "not tool_input nor error",
}


def handler_problems(event: str, handler: Any) -> list[str]:
    """Why one handler cannot be carried (empty: it can)."""
    if event in NOT_CARRIED_EVENTS:
        return [NOT_CARRIED_EVENTS[event]]
    if not isinstance(handler, dict):
        return []  # malformed: the runner's validation names it, as Claude Code would skip it
    kind = handler.get("type")
    if kind not in HANDLER_FIELDS:
        return [TYPE_WHY.get(str(kind), f"a hook of type {kind!r} is not one the runner runs")]
    return [
        f"{key}: {FIELD_WHY.get(key, 'a field the runner does not know')}"
        for key in handler
        if key not in HANDLER_FIELDS[kind]
    ]


def matcher_problem(event: str, group: Any) -> str | None:
    """Why a group's matcher cannot be carried, or None."""
    matcher = group.get("matcher", "") if isinstance(group, dict) else ""
    if not isinstance(matcher, str) or matcher in ("", "*"):
        return None
    spec = spec_of(AxEvent(event))
    if spec.tool or spec.subject:
        return None
    return f"matcher {matcher!r}: Claude Code ignores a matcher on {event}; the runner would not"


def split_group(event: str, group: Any) -> tuple[Any | None, Any | None, list[tuple[str, str]]]:
    """(the part that moves, the part that stays with Claude Code, [(where, why)])."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return group, None, []
    problem = matcher_problem(event, group)
    if problem is not None:
        return None, group, [("", problem)]
    moving: list[Any] = []
    staying: list[Any] = []
    found: list[tuple[str, str]] = []
    for index, handler in enumerate(group["hooks"]):
        why = handler_problems(event, handler)
        found += [(f".hooks[{index}]", each) for each in why]
        (staying if why else moving).append(handler)
    return (
        {**group, "hooks": moving} if moving else None,
        {**group, "hooks": staying} if staying else None,
        found,
    )
