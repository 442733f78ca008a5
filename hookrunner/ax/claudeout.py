"""What the runner prints as Claude Code's hook command (``fire --claude-exit-codes``).

Claude Code validates any stdout of a hook that starts with ``{`` against its own
hook-output schema (``continue``, ``suppressOutput``, ``stopReason``, ``decision``
``approve``/``block``, ``reason``, ``systemMessage``, ``hookSpecificOutput``) and reports
"Hook JSON output validation failed" for anything else, so the runner's own answer
(``FireResult.to_json``: ``"decision": "allow"``) must never reach it. Invariant: the
answer is ``None`` (stdout stays empty) or a document of that schema, and a block is
never written here: it is exit 2 with the reason on stderr, which Claude Code reads.
"""

from __future__ import annotations

from typing import Any

from sandbox_egress.hookrunner.ax.model import AxEvent, FireResult

# The events whose exit-0 text Claude Code adds to the model's context.
_CONTEXT_EVENTS = frozenset(
    {AxEvent.POST_TOOL_USE, AxEvent.POST_TOOL_USE_FAILURE, AxEvent.USER_PROMPT_SUBMIT}
)
# The events whose hooks may keep Claude working: Claude Code honours their block.
_STOP_EVENTS = frozenset({AxEvent.STOP, AxEvent.SUBAGENT_STOP})
# Claude Code's ``hookEventName`` for each event that may carry ``hookSpecificOutput``.
_CLAUDE_NAMES = {
    AxEvent.POST_TOOL_USE: "PostToolUse",
    AxEvent.POST_TOOL_USE_FAILURE: "PostToolUseFailure",
    AxEvent.USER_PROMPT_SUBMIT: "UserPromptSubmit",
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
