"""The runner as Claude Code's hook command prints nothing or Claude Code's hook output.

Claude Code (2.1.x) validates a hook's stdout that starts with `{` against its
hook-output schema and reports "Hook JSON output validation failed" otherwise, so the
runner's own answer ("decision": "allow") must never be printed in that mode. The schema
(data/claude-hook-output.schema.json) is written from Claude Code's hooks reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sandbox_egress.hookrunner.ax.claudeout import claude_answer
from sandbox_egress.hookrunner.ax.model import AxEvent, Cause, FireResult, Verdict

CLAUDE_OUTPUT = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parent / "data" / "claude-hook-output.schema.json").read_text())
)

FEEDBACK = "<hook_feedback>\nformatted\n</hook_feedback>"
CASES = {
    # name: (result, the document printed, or None for an empty stdout)
    "allowed, nothing to say": (
        FireResult(AxEvent.PRE_TOOL_USE, Verdict.ALLOW, Cause.ALLOWED),
        None,
    ),
    "no hooks": (FireResult(AxEvent.STOP, Verdict.ALLOW, Cause.NO_HOOKS), None),
    "feedback after a tool": (
        FireResult(AxEvent.POST_TOOL_USE, Verdict.ALLOW, Cause.ALLOWED, feedback=FEEDBACK),
        {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": FEEDBACK}},
    ),
    "feedback after a failed tool": (
        FireResult(AxEvent.POST_TOOL_USE_FAILURE, Verdict.ALLOW, Cause.ALLOWED, feedback="x"),
        {"hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": "x"}},
    ),
    "prompt context": (
        FireResult(AxEvent.USER_PROMPT_SUBMIT, Verdict.ALLOW, Cause.ALLOWED, context="ctx"),
        {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}},
    ),
    "notices for the user": (
        FireResult(AxEvent.STOP, Verdict.ALLOW, Cause.ALLOWED, notices=("a", "b")),
        {"systemMessage": "a\nb"},
    ),
    "denied: exit 2 and stderr, never stdout": (
        FireResult(AxEvent.PRE_TOOL_USE, Verdict.DENY, Cause.PERMISSION_DENY, reason="no"),
        None,
    ),
    "ask: a block too": (
        FireResult(AxEvent.PRE_TOOL_USE, Verdict.ASK, Cause.ASK, reason="sure?"),
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_claude_answer(name: str) -> None:
    result, expected = CASES[name]
    answer = claude_answer(result)
    assert answer == expected
    if answer is not None:
        CLAUDE_OUTPUT.validate(answer)


def test_the_runners_own_answer_is_not_claude_codes() -> None:
    """What was printed before: Claude Code rejects it, so the schema must too."""
    own = FireResult(AxEvent.PRE_TOOL_USE, Verdict.ALLOW, Cause.ALLOWED).to_json()
    with pytest.raises(jsonschema.ValidationError):
        CLAUDE_OUTPUT.validate(own)
