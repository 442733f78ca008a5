"""What the runner prints as Claude Code's hook command (``fire --claude-exit-codes``).

Claude Code validates any stdout of a hook that starts with ``{`` against its own
hook-output schema (``continue``, ``suppressOutput``, ``stopReason``, ``decision``
``approve``/``block``, ``reason``, ``systemMessage``, ``hookSpecificOutput``) and reports
"Hook JSON output validation failed" for anything else, so the runner's own answer
(``FireResult.to_json``: ``"decision": "allow"``) must never reach it. Invariant: the
answer is ``None`` (stdout stays empty) or a document of that schema.

``claude_answer`` (``--claude-exit-codes``): an allowed result only; a block is exit 2
with the reason on stderr, which Claude Code shows after the hook's command line.
``claude_json`` (``--claude-json``, what ``hookrunner claude install`` wires, D390): every
result is an answer at exit 0, so that what the user's hooks said reaches Claude Code as
they said it: a deny is ``permissionDecision: "deny"`` with the hook's own reason (no
command line before it), an ask is ``"ask"`` (Claude Code asks, or refuses when nobody
can answer), ``continue: false`` stops Claude with its ``stopReason``, and the hooks'
``updatedInput``, ``systemMessage``, ``additionalContext`` and explicit ``allow`` are
passed on (``FireResult.carried``); ``SessionStart`` context reaches the model.
"""

from __future__ import annotations

from typing import Any

from sandbox_egress.hookrunner.ax.model import AxEvent, Cause, FireResult, Verdict

# The events whose exit-0 text Claude Code adds to the model's context.
_CONTEXT_EVENTS = frozenset(
    {
        AxEvent.POST_TOOL_USE,
        AxEvent.POST_TOOL_USE_FAILURE,
        AxEvent.USER_PROMPT_SUBMIT,
        AxEvent.SESSION_START,
    }
)
# The events whose hooks may keep Claude working: Claude Code honours their block.
_STOP_EVENTS = frozenset({AxEvent.STOP, AxEvent.SUBAGENT_STOP})
# Claude Code's ``hookEventName`` for each event that may carry ``hookSpecificOutput``.
_CLAUDE_NAMES = {
    AxEvent.POST_TOOL_USE: "PostToolUse",
    AxEvent.POST_TOOL_USE_FAILURE: "PostToolUseFailure",
    AxEvent.USER_PROMPT_SUBMIT: "UserPromptSubmit",
    AxEvent.SESSION_START: "SessionStart",
    AxEvent.PRE_TOOL_USE: "PreToolUse",
}


def claude_answer(result: FireResult) -> dict[str, Any] | None:
    """The stdout document for an allowed result, or None for nothing to say.

    Feedback for the model (a PostToolUse ``<hook_feedback>`` block, UserPromptSubmit
    context) is ``hookSpecificOutput.additionalContext``; notices for the user are
    ``systemMessage``; a Stop or SubagentStop hook that asked to block (ignored in the
    AX dialect) is Claude Code's ``{"decision": "block", "reason": ...}``, which keeps
    Claude working. The runner's own fields (cause, source) stay in its logs.
    """
    if not result.allowed:
        return None
    answer: dict[str, Any] = {}
    if result.event in _STOP_EVENTS:
        asked = [run for run in result.runs if run.asked_block]
        if asked:  # Claude Code's own meaning: do not stop yet, here is why (D228)
            reasons = [run.notice for run in asked if run.notice]
            answer["decision"] = "block"
            answer["reason"] = "\n".join(reasons) or f"A {result.event.value} hook asked to go on."
    context = result.feedback if result.feedback is not None else result.context
    if context and result.event in _CONTEXT_EVENTS:
        answer["hookSpecificOutput"] = {
            "hookEventName": _CLAUDE_NAMES[result.event],
            "additionalContext": context,
        }
    notices = [n for n in result.notices if n not in answer.get("reason", "").split("\n")]
    if notices:
        answer["systemMessage"] = "\n".join(notices)
    return answer or None


def claude_json(result: FireResult) -> dict[str, Any] | None:
    """The stdout document of any result (``--claude-json``), None for nothing to say;
    a result this cannot put as an answer (a block of an event Claude Code reads no
    JSON block of) is None with ``result.allowed`` false: the caller exits 2."""
    carried = dict(result.carried)
    common: dict[str, Any] = {
        k: carried[k] for k in ("systemMessage", "suppressOutput") if k in carried
    }
    if carried.get("continue") is False or (
        not result.allowed and result.cause is Cause.CONTINUE_FALSE
    ):
        stop = carried.get("stopReason", result.reason if not result.allowed else None)
        return {"continue": False, **({"stopReason": stop} if stop else {}), **common}
    if not result.allowed:
        return _refusal(result, carried, common)
    answer = claude_answer(result) or {}
    if result.event is AxEvent.PRE_TOOL_USE:
        specific = {
            k: carried[k]
            for k in ("permissionDecision", "updatedInput", "additionalContext")
            if k in carried
        }
        if specific:
            answer["hookSpecificOutput"] = {"hookEventName": "PreToolUse", **specific}
    if "systemMessage" in common and "systemMessage" in answer:
        common["systemMessage"] = f"{answer['systemMessage']}\n{common['systemMessage']}"
    return {**answer, **common} or None


def _refusal(
    result: FireResult, carried: dict[str, Any], common: dict[str, Any]
) -> dict[str, Any] | None:
    reason = result.reason or f"Blocked by a {result.event.value} hook."
    if result.event is AxEvent.PRE_TOOL_USE:
        specific: dict[str, Any] = {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask" if result.decision is Verdict.ASK else "deny",
            "permissionDecisionReason": reason,
        }
        if result.decision is Verdict.ASK and "updatedInput" in carried:
            specific["updatedInput"] = carried["updatedInput"]
        return {"hookSpecificOutput": specific, **common}
    if result.event is AxEvent.USER_PROMPT_SUBMIT:
        return {"decision": "block", "reason": reason, **common}
    return None
