"""The bridge's word put into Claude Code's PreToolUse answer (issue 47, D500).

``with_bridge(answer, word, grant_steps)``: the runner's own answer (``claudeout``, with
the boundary's ``updatedInput`` for Bash, ``firebound``) and the bridge's word make one
document. A deny of the runner's stands (the bridge is not asked, ``ax.cli``); the
bridge's deny replaces an allow or an ask; its ask turns an allow into an ask (an ask
already there keeps its reason, the bridge's is added) and, for Bash, puts the grant
steps before the (already wrapped) command, so that only a yes runs them.

``unwrapped(text)``: the command without the grant steps (what PostToolUse hooks read,
with ``bound.original`` after it).

Invariants: pure; never turns a deny or an ask into an allow; grant steps are only ever
added to an ``updatedInput`` whose command is the runner's boundary wrapping.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sandbox_egress.hookrunner.bridge.grant import BOOT
from sandbox_egress.hookrunner.bridge.judge import BridgeWord

WRAPPED_HEAD = "{ __hookrunner_cwd="  # how enforce.bound.shell_command's text starts


def with_bridge(
    answer: Mapping[str, Any] | None, word: BridgeWord, grant_steps: Sequence[str]
) -> dict[str, Any]:
    result = dict(answer or {})
    specific = dict(result.get("hookSpecificOutput") or {})
    specific["hookEventName"] = "PreToolUse"
    if word.decision == "deny":
        specific.pop("updatedInput", None)
        specific.update(permissionDecision="deny", permissionDecisionReason=word.reason)
        result["hookSpecificOutput"] = specific
        return result
    before = (
        specific.get("permissionDecisionReason")
        if specific.get("permissionDecision") == "ask"
        else None
    )
    specific["permissionDecision"] = "ask"
    specific["permissionDecisionReason"] = "\n".join(filter(None, [before, word.reason]))
    given = specific.get("updatedInput")
    if isinstance(given, Mapping) and grant_steps:
        command = given.get("command")
        if isinstance(command, str) and command.startswith(WRAPPED_HEAD):
            specific["updatedInput"] = {**given, "command": "; ".join([*grant_steps, command])}
    result["hookSpecificOutput"] = specific
    return result


def unwrapped(text: str) -> str:
    """``text`` without the bridge's grant steps before the boundary's wrapping."""
    at = text.find("; " + WRAPPED_HEAD)
    if at < 0:
        return text
    here = os.path.dirname(sys.executable)
    lexer = shlex.shlex(text[:at], posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return text
    steps: list[list[str]] = [[]]
    for word in words:
        if word == ";":
            steps.append([])
        else:
            steps[-1].append(word)
    head = ["-I", "-S", "-c", BOOT]
    for step in steps:
        if len(step) < 6 or os.path.dirname(step[0]) != here or step[1:5] != head:
            return text
    return text[at + 2 :]
