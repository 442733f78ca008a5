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
    ``systemMessage``. The runner's own fields (cause, source) stay in its logs.
    """
    if not result.allowed:
        return None
    answer: dict[str, Any] = {}
    context = result.feedback if result.feedback is not None else result.context
    if context and result.event in _CONTEXT_EVENTS:
        answer["hookSpecificOutput"] = {
            "hookEventName": _CLAUDE_NAMES[result.event],
            "additionalContext": context,
        }
    if result.notices:
        answer["systemMessage"] = "\n".join(result.notices)
    return answer or None
