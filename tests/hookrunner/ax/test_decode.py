"""Decoding one finished hook (pure tables), and aggregating runs into the event's decision."""

from __future__ import annotations

import json

import pytest

from sandbox_egress.common.process import ProcessResult
from sandbox_egress.hookrunner.ax.aggregate import decide, gather
from sandbox_egress.hookrunner.ax.decode import ASK_REASON, decode
from sandbox_egress.hookrunner.ax.matcher import compile_ax_matcher
from sandbox_egress.hookrunner.ax.model import (
    AxEntry,
    AxEvent,
    Cause,
    Effect,
    HookRun,
    Protocol,
    Verdict,
)
from sandbox_egress.hookrunner.outcome import Outcome

PRE = AxEvent.PRE_TOOL_USE
PROMPT = AxEvent.USER_PROMPT_SUBMIT
POST = AxEvent.POST_TOOL_USE


def ax_entry(
    event: AxEvent = PRE,
    *,
    protocol: Protocol = Protocol.CLAUDE_CODE,
    block: bool = False,
    source: str = "hooks[0]",
) -> AxEntry:
    return AxEntry(event, compile_ax_matcher(""), "true", block, protocol, 30, "", source, "f $")


def process(
    code: int | None = 0,
    stdout: str | bytes = b"",
    stderr: str = "",
    *,
    timed_out: bool = False,
    truncated: bool = False,
    spawn_error: str | None = None,
) -> ProcessResult:
    out = stdout if isinstance(stdout, bytes) else stdout.encode()
    return ProcessResult(
        code, out, stderr.encode(), truncated, False, timed_out, 0.01, spawn_error=spawn_error
    )


def answer(**fields: object) -> str:
    return json.dumps(fields)


CLAUDE_CODE_BLOCKING = [
    # (name, process, outcome, effect, cause, reason)
    ("exit 2 blocks with stderr", process(2, "", "no force pushes\n"),
     Outcome.EXIT_2, Effect.BLOCK, Cause.EXIT_2, "no force pushes"),
    ("exit 2 with malformed stdout still blocks", process(2, "{not json", "bad idea"),
     Outcome.EXIT_2, Effect.BLOCK, Cause.EXIT_2, "bad idea"),
    ("exit 2 with an allow on stdout still blocks", process(2, answer(permissionDecision="allow"), "x"),
     Outcome.EXIT_2, Effect.BLOCK, Cause.EXIT_2, "x"),
    ("exit 2 without stderr uses a stated reason", process(2, answer(reason="stated")),
     Outcome.EXIT_2, Effect.BLOCK, Cause.EXIT_2, "stated"),
    ("exit 2 without any text", process(2),
     Outcome.EXIT_2, Effect.BLOCK, Cause.EXIT_2, "Blocked by a PreToolUse hook (exit status 2)."),
    ("empty stdout continues", process(0, " \n"), Outcome.OK, Effect.CONTINUE, None, None),
    ("no decision continues", process(0, answer(suppressOutput=True)),
     Outcome.OK, Effect.CONTINUE, None, None),
    ("allow", process(0, answer(permissionDecision="allow", reason="fine")),
     Outcome.ALLOW, Effect.CONTINUE, None, None),
    ("deny", process(0, answer(permissionDecision="deny", reason="nope")),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "nope"),
    ("deny without a reason", process(0, answer(permissionDecision="deny")),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "Blocked by a PreToolUse hook."),
    ("deny with a non-string reason", process(0, answer(permissionDecision="deny", reason=42)),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "Blocked by a PreToolUse hook."),
    ("deny with a null reason", process(0, answer(permissionDecision="deny", reason=None)),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "Blocked by a PreToolUse hook."),
    ("ask", process(0, answer(permissionDecision="ask", reason="sure?")),
     Outcome.ASK, Effect.ASK, Cause.ASK, "sure?"),
    ("ask without a reason", process(0, answer(permissionDecision="ask")),
     Outcome.ASK, Effect.ASK, Cause.ASK, ASK_REASON),
    ("nested deny", process(0, answer(hookSpecificOutput={"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "nested no"})),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "nested no"),
    ("nested ask", process(0, answer(hookSpecificOutput={"permissionDecision": "ask"})),
     Outcome.ASK, Effect.ASK, Cause.ASK, ASK_REASON),
    ("top allow, nested deny: the stricter", process(0, answer(permissionDecision="allow",
        hookSpecificOutput={"permissionDecision": "deny"})),
     Outcome.DENY, Effect.BLOCK, Cause.PERMISSION_DENY, "Blocked by a PreToolUse hook."),
    ("decision block", process(0, answer(decision="block", reason="old style")),
     Outcome.DENY, Effect.BLOCK, Cause.DECISION_BLOCK, "old style"),
    ("decision approve", process(0, answer(decision="approve")),
     Outcome.ALLOW, Effect.CONTINUE, None, None),
    ("permissionDecision beats decision", process(0, answer(permissionDecision="allow", decision="block")),
     Outcome.ALLOW, Effect.CONTINUE, None, None),
    ("continue false", process(0, answer(**{"continue": False, "stopReason": "halt"})),
     Outcome.DENY, Effect.BLOCK, Cause.CONTINUE_FALSE, "halt"),
    ("exit 1 does not block", process(1, answer(permissionDecision="deny"), "oops"),
     Outcome.EXIT_NONZERO, Effect.CONTINUE, None, None),
    ("exit 127 does not block", process(127, "", "sh: x: not found"),
     Outcome.NOT_FOUND, Effect.CONTINUE, None, None),
    ("timeout does not block", process(None, timed_out=True),
     Outcome.TIMEOUT, Effect.CONTINUE, None, None),
    ("crash does not block", process(-11), Outcome.CRASHED, Effect.CONTINUE, None, None),
]  # fmt: skip
MALFORMED = [
    ("text", b"checking..."),
    ("not utf-8", b"\xff\xfe"),
    ("array", b'[{"permissionDecision": "deny"}]'),
    ("string", b'"deny"'),
    ("trailing text", b'{"permissionDecision": "allow"} ok'),
    ("repeated key", b'{"permissionDecision": "allow", "permissionDecision": "deny"}'),
    ("unknown decision", b'{"permissionDecision": "DENY"}'),
    ("null decision", b'{"permissionDecision": null}'),
    ("nested not an object", b'{"hookSpecificOutput": "deny"}'),
    ("unknown nested decision", b'{"hookSpecificOutput": {"permissionDecision": "block"}}'),
    ("bad old decision", b'{"decision": "deny"}'),
    ("continue not a boolean", b'{"continue": "no"}'),
    ("NaN", b'{"permissionDecision": NaN}'),
]


@pytest.mark.parametrize(
    ("name", "result", "outcome", "effect", "cause", "reason"), CLAUDE_CODE_BLOCKING
)
def test_claude_code_blocking_events(
    name: str,
    result: ProcessResult,
    outcome: Outcome,
    effect: Effect,
    cause: Cause | None,
    reason: str | None,
) -> None:
    for event in (PRE, PROMPT):
        decoded = decode(event, ax_entry(event), result)
        expected_reason = reason.replace("PreToolUse", event.value) if reason else None
        assert (decoded.outcome, decoded.effect, decoded.cause, decoded.reason) == (
            outcome,
            effect,
            cause,
            expected_reason,
        )


@pytest.mark.parametrize(("name", "stdout"), MALFORMED)
def test_malformed_stdout_on_exit_0_blocks(name: str, stdout: bytes) -> None:
    decoded = decode(PRE, ax_entry(), process(0, stdout))
    assert (decoded.outcome, decoded.effect, decoded.cause, decoded.failed) == (
        Outcome.MALFORMED,
        Effect.BLOCK,
        Cause.MALFORMED_OUTPUT,
        True,
    )
    assert decoded.reason is not None
    assert decoded.reason.startswith(
        "Blocked by a PreToolUse hook: its output is not a valid answer"
    )


def test_truncated_stdout_is_malformed() -> None:
    decoded = decode(
        PRE, ax_entry(), process(0, answer(permissionDecision="allow"), truncated=True)
    )
    assert (decoded.outcome, decoded.effect) == (Outcome.MALFORMED, Effect.BLOCK)


def test_non_string_reason_is_noted() -> None:
    decoded = decode(PRE, ax_entry(), process(0, answer(permissionDecision="deny", reason=["x"])))
    assert decoded.detail == "denied; its reason is not a string, so the default reason is used"


LEGACY = [
    # (name, event, blockOnFailure, process, effect, cause, reason, failed)
    ("exit 0", PRE, True, process(0, "ignored"), Effect.CONTINUE, None, None, False),
    ("exit 1 without blockOnFailure", PRE, False, process(1, "", "e"), Effect.CONTINUE, None, None, True),
    ("exit 1 blocks with stderr", PRE, True, process(1, "out", "err\n"),
     Effect.BLOCK, Cause.BLOCK_ON_FAILURE, "err", False),
    ("exit 2 blocks with stdout when stderr is empty", PRE, True, process(2, "out\n"),
     Effect.BLOCK, Cause.BLOCK_ON_FAILURE, "out", False),
    ("timeout blocks with blockOnFailure", PROMPT, True, process(None, timed_out=True),
     Effect.BLOCK, Cause.BLOCK_ON_FAILURE,
     "Blocked by a UserPromptSubmit hook that failed: did not finish within 30 s; "
     "its process group was killed.", True),
    ("missing program blocks", PRE, True, process(127),
     Effect.BLOCK, Cause.BLOCK_ON_FAILURE,
     "Blocked by a PreToolUse hook that failed: exited with status 127.", True),
    ("a deny JSON is not a legacy block", PRE, True, process(0, answer(permissionDecision="deny")),
     Effect.CONTINUE, None, None, False),
    ("blockOnFailure cannot block PostToolUse", POST, True, process(1),
     Effect.CONTINUE, None, None, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "event", "block", "result", "effect", "cause", "reason", "failed"), LEGACY
)
def test_legacy_decoding(
    name: str,
    event: AxEvent,
    block: bool,
    result: ProcessResult,
    effect: Effect,
    cause: Cause | None,
    reason: str | None,
    failed: bool,
) -> None:
    decoded = decode(event, ax_entry(event, protocol=Protocol.LEGACY, block=block), result)
    assert (decoded.effect, decoded.cause, decoded.reason, decoded.failed) == (
        effect,
        cause,
        reason,
        failed,
    )


# Issue 20: blockOnFailure makes a claude-code entry fail closed too (it was half of it:
# a malformed answer blocked, a crash, a timeout or a missing program let the call through).
CLAUDE_CODE_FAIL_CLOSED = [
    # (name, event, blockOnFailure, process, outcome, effect, reason)
    ("exit 1 continues without blockOnFailure", PRE, False, process(1, "", "boom"),
     Outcome.EXIT_NONZERO, Effect.CONTINUE, None),
    ("exit 1 blocks with blockOnFailure", PRE, True, process(1, "", "Traceback ...\nRecursionError"),
     Outcome.EXIT_NONZERO, Effect.BLOCK,
     "Blocked by a PreToolUse hook that failed: exited with status 1 (stderr: 'Traceback ...')."),
    ("timeout blocks", PROMPT, True, process(None, timed_out=True), Outcome.TIMEOUT, Effect.BLOCK,
     "Blocked by a UserPromptSubmit hook that failed: did not finish within 30 s; "
     "its process group was killed."),
    ("missing program blocks", PRE, True, process(127), Outcome.NOT_FOUND, Effect.BLOCK,
     "Blocked by a PreToolUse hook that failed: exited with status 127."),
    ("crash blocks", PRE, True, process(-11), Outcome.CRASHED, Effect.BLOCK,
     "Blocked by a PreToolUse hook that failed: killed by SIGSEGV."),
    ("exit 2 is still its own block", PRE, True, process(2, "", "no"), Outcome.EXIT_2, Effect.BLOCK,
     "no"),
    ("an allow still allows", PRE, True, process(0, answer(permissionDecision="allow")),
     Outcome.ALLOW, Effect.CONTINUE, None),
    ("PostToolUse cannot block", POST, True, process(1), Outcome.EXIT_NONZERO, Effect.CONTINUE, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "event", "block", "result", "outcome", "effect", "reason"), CLAUDE_CODE_FAIL_CLOSED
)
def test_claude_code_block_on_failure(
    name: str,
    event: AxEvent,
    block: bool,
    result: ProcessResult,
    outcome: Outcome,
    effect: Effect,
    reason: str | None,
) -> None:
    decoded = decode(event, ax_entry(event, block=block), result)
    assert (decoded.outcome, decoded.effect, decoded.reason) == (outcome, effect, reason)
    if effect is Effect.BLOCK and outcome is not Outcome.EXIT_2:
        assert (decoded.cause, decoded.failed) == (Cause.BLOCK_ON_FAILURE, True)


FEEDBACK = [
    # (name, protocol, process, feedback)
    ("legacy: trimmed stdout of exit 0", Protocol.LEGACY, process(0, "\n  formatted a.py \n"), "formatted a.py"),
    ("legacy: nothing from a failed hook", Protocol.LEGACY, process(1, "text"), None),
    ("legacy: empty stdout", Protocol.LEGACY, process(0, "  \n"), None),
    ("cc: additionalContext", Protocol.CLAUDE_CODE,
     process(0, answer(hookSpecificOutput={"hookEventName": "PostToolUse", "additionalContext": "ctx"})), "ctx"),
    ("cc: decision block reason", Protocol.CLAUDE_CODE,
     process(0, answer(decision="block", reason="lint failed")), "lint failed"),
    ("cc: both, reason first", Protocol.CLAUDE_CODE,
     process(0, answer(decision="block", reason="r", hookSpecificOutput={"additionalContext": "c"})), "r\nc"),
    ("cc: stderr on exit 2", Protocol.CLAUDE_CODE, process(2, "ignored", " fix the types \n"), "fix the types"),
    ("cc: other exits give nothing", Protocol.CLAUDE_CODE, process(1, "", "err"), None),
    ("cc: plain stdout gives nothing", Protocol.CLAUDE_CODE, process(0, "plain text"), None),
    ("cc: no feedback fields", Protocol.CLAUDE_CODE, process(0, answer(suppressOutput=True)), None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "protocol", "result", "feedback"), FEEDBACK)
def test_post_tool_use_feedback(
    name: str, protocol: Protocol, result: ProcessResult, feedback: str | None
) -> None:
    decoded = decode(POST, ax_entry(POST, protocol=protocol), result)
    assert (decoded.effect, decoded.feedback) == (Effect.CONTINUE, feedback)


@pytest.mark.parametrize("protocol", list(Protocol))
@pytest.mark.parametrize(
    "event",
    [AxEvent.SESSION_START, AxEvent.SESSION_END, AxEvent.POST_COMPACT, AxEvent.INTERRUPT,
     AxEvent.POST_TOOL_USE_FAILURE],
)  # fmt: skip
@pytest.mark.parametrize(
    "result",
    [process(2, "", "block!"), process(0, answer(permissionDecision="deny")), process(0, "x")],
)
def test_observation_events_ignore_the_decoder(
    protocol: Protocol, event: AxEvent, result: ProcessResult
) -> None:
    decoded = decode(event, ax_entry(event, protocol=protocol, block=True), result)
    assert (decoded.effect, decoded.feedback, decoded.notice) == (Effect.CONTINUE, None, None)


def test_stop_notice_is_legacy_stdout() -> None:
    decoded = decode(
        AxEvent.STOP, ax_entry(AxEvent.STOP, protocol=Protocol.LEGACY), process(0, " run tests \n")
    )
    assert (decoded.effect, decoded.notice) == (Effect.CONTINUE, "run tests")


# Aggregation -------------------------------------------------------------------------------


def run_of(effect: Effect, source: str, reason: str | None = None, cause: Cause | None = None):
    return HookRun(ax_entry(source=source), Outcome.OK, effect, "", 0.0, reason, cause)


def fold(event: AxEvent, runs: list[HookRun], interactive: bool = False):
    ran: list[str] = []

    def run(entry: AxEntry) -> HookRun:
        ran.append(entry.source)
        return next(r for r in runs if r.entry.source == entry.source)

    result = decide(event, [r.entry for r in runs], run, interactive=interactive, tool="bash")
    return result, ran


def test_ask_then_deny_denies() -> None:
    result, ran = fold(
        PRE,
        [
            run_of(Effect.ASK, "a", "confirm?", Cause.ASK),
            run_of(Effect.BLOCK, "b", "no", Cause.PERMISSION_DENY),
        ],
        interactive=True,
    )
    assert (result.decision, result.cause, result.reason, result.source, ran) == (
        Verdict.DENY,
        Cause.PERMISSION_DENY,
        "no",
        "b",
        ["a", "b"],
    )


def test_deny_stops_later_hooks() -> None:
    result, ran = fold(
        PRE,
        [
            run_of(Effect.BLOCK, "a", "no", Cause.EXIT_2),
            run_of(Effect.ASK, "b", "?", Cause.ASK),
        ],
    )
    assert (result.decision, result.cause, ran) == (Verdict.DENY, Cause.EXIT_2, ["a"])


def test_ask_with_an_interactive_channel_keeps_the_first_reason() -> None:
    result, ran = fold(
        PRE,
        [
            run_of(Effect.ASK, "a", "first", Cause.ASK),
            run_of(Effect.CONTINUE, "b"),
            run_of(Effect.ASK, "c", "second", Cause.ASK),
        ],
        interactive=True,
    )
    assert (result.decision, result.cause, result.reason, result.source, ran) == (
        Verdict.ASK,
        Cause.ASK,
        "first",
        "a",
        ["a", "b", "c"],
    )


def test_ask_headless_is_an_ordinary_rejection() -> None:
    result, _ = fold(PRE, [run_of(Effect.ASK, "a", "deploy to prod?", Cause.ASK)])
    assert (result.decision, result.cause) == (Verdict.DENY, Cause.ASK_HEADLESS)
    assert result.reason == (
        "Permission to use bash was rejected: a hook asked for interactive confirmation "
        "(deploy to prod?) and this run has no one to ask."
    )


def test_ask_always_blocks_a_prompt() -> None:
    result, _ = fold(PROMPT, [run_of(Effect.ASK, "a", "really?", Cause.ASK)], interactive=True)
    assert (result.decision, result.cause, result.reason) == (
        Verdict.DENY,
        Cause.ASK_ON_PROMPT,
        "really?",
    )


def test_no_hooks_and_all_continue() -> None:
    assert fold(PRE, [])[0].cause is Cause.NO_HOOKS
    result, ran = fold(PRE, [run_of(Effect.CONTINUE, "a"), run_of(Effect.CONTINUE, "b")])
    assert (result.decision, result.cause, ran) == (Verdict.ALLOW, Cause.ALLOWED, ["a", "b"])


def test_gather_builds_one_feedback_block_in_hook_order() -> None:
    runs = [
        HookRun(ax_entry(POST, source="a"), Outcome.OK, Effect.CONTINUE, "", 0.0, feedback="one"),
        HookRun(ax_entry(POST, source="b"), Outcome.OK, Effect.CONTINUE, "", 0.0),
        HookRun(ax_entry(POST, source="c"), Outcome.OK, Effect.CONTINUE, "", 0.0, feedback="two"),
    ]
    result = gather(POST, [r.entry for r in runs], lambda e: next(r for r in runs if r.entry == e))
    assert result.feedback == '<hook_feedback event="PostToolUse">\none\n\ntwo\n</hook_feedback>'
    assert result.with_feedback("tool output") == (
        'tool output\n\n<hook_feedback event="PostToolUse">\none\n\ntwo\n</hook_feedback>'
    )
    assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.NON_BLOCKING)
