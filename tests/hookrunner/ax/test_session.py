"""The dialect with real child processes: decoding, decisions, feedback, trust, warnings."""

from __future__ import annotations

import json
import shlex

from sandbox_egress.hookrunner.ax.model import AxEvent, Cause, Verdict
from tests.hookrunner.ax.conftest import AxEnv, cc, entry


def sh(*lines: str) -> str:
    return "; ".join(lines)


def answer(**fields: object) -> str:
    return f"printf '%s' {shlex.quote(json.dumps(fields))}"


def test_exit_2_with_malformed_stdout_blocks_with_stderr(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                cc(
                    "PreToolUse",
                    sh("echo '{not json'", "echo 'no force pushes' >&2", "exit 2"),
                    matcher="bash",
                )
            ]
        }
    )
    result = ax.session().fire("PreToolUse", {"tool": "bash", "args": {"command": "git push -f"}})
    assert (result.decision, result.cause, result.reason, result.source) == (
        Verdict.DENY,
        Cause.EXIT_2,
        "no force pushes",
        "hooks[0]",
    )
    assert ax.runs("PreToolUse", "exit_2") == 1
    [line] = [x for x in ax.stream.getvalue().splitlines() if "decision" in x]
    assert "cause=exit_2" in line
    assert 'reason="no force pushes"' in line


def test_ask_then_deny_denies_and_both_ran(ax: AxEnv) -> None:
    order = ax.root / "order"
    ax.hooks(
        {
            "hooks": [
                cc(
                    "PreToolUse",
                    sh(f"echo ask >> {order}", answer(permissionDecision="ask", reason="sure?")),
                ),
                cc(
                    "PreToolUse",
                    sh(
                        f"echo deny >> {order}",
                        answer(
                            hookSpecificOutput={
                                "permissionDecision": "deny",
                                "permissionDecisionReason": "never",
                            }
                        ),
                    ),
                ),
                cc("PreToolUse", sh(f"echo after >> {order}")),
            ]
        }
    )
    result = ax.session(interactive=True).fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision, result.cause, result.reason, result.source) == (
        Verdict.DENY,
        Cause.PERMISSION_DENY,
        "never",
        "hooks[1]",
    )
    assert order.read_text().split() == ["ask", "deny"]


def test_ask_is_refused_headless_and_asked_when_interactive(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("PreToolUse", answer(permissionDecision="ask", reason="deploy?"))]})
    headless = ax.session().fire("PreToolUse", {"tool": "deploy", "args": {}})
    assert (headless.decision, headless.cause) == (Verdict.DENY, Cause.ASK_HEADLESS)
    assert headless.reason == (
        "Permission to use deploy was rejected: a hook asked for interactive confirmation "
        "(deploy?) and this run has no one to ask."
    )
    asked = ax.session(interactive=True).fire("PreToolUse", {"tool": "deploy", "args": {}})
    assert (asked.decision, asked.cause, asked.reason) == (Verdict.ASK, Cause.ASK, "deploy?")
    assert asked.to_json() == {
        "event": "PreToolUse",
        "decision": "ask",
        "cause": "ask",
        "reason": "deploy?",
        "source": "hooks[0]",
    }


def test_ask_blocks_a_prompt_even_interactively(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("UserPromptSubmit", answer(permissionDecision="ask"))]})
    result = ax.session(interactive=True).fire("UserPromptSubmit", {"prompt": "hi"})
    assert (result.decision, result.cause, result.reason) == (
        Verdict.DENY,
        Cause.ASK_ON_PROMPT,
        "hook requested user confirmation",
    )


def test_deny_with_a_non_string_reason_still_denies(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("PreToolUse", answer(permissionDecision="deny", reason={"code": 7}))]})
    result = ax.session().fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision, result.cause, result.reason) == (
        Verdict.DENY,
        Cause.PERMISSION_DENY,
        "Blocked by a PreToolUse hook.",
    )


def test_malformed_exit_0_blocks_and_warns_fail_safe(ax: AxEnv) -> None:
    # On PreToolUse; on UserPromptSubmit plain text is context (test_claude_code_compat).
    ax.hooks({"hooks": [cc("PreToolUse", "echo looks fine to me")]})
    result = ax.session().fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision, result.cause) == (Verdict.DENY, Cause.MALFORMED_OUTPUT)
    [warning] = ax.warnings()
    assert (warning["kind"], warning["outcome"], warning["action"], warning["source"]) == (
        "fail_safe",
        "malformed",
        "blocked",
        "hooks[0]",
    )


def test_other_exits_do_not_block_and_are_never_silent(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                cc("PreToolUse", sh(answer(permissionDecision="deny"), "exit 1")),
                cc("PreToolUse", "definitely-not-a-program-xyz"),
                entry("PreToolUse", "echo legacy failure >&2; exit 3"),
            ]
        }
    )
    result = ax.session().fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.ALLOWED)
    assert [(w["kind"], w["outcome"], w["action"]) for w in ax.warnings()] == [
        ("fail_open", "exit_nonzero", "allowed"),
        ("fail_open", "not_found", "allowed"),
        ("fail_open", "exit_nonzero", "allowed"),
    ]
    assert ax.warnings()[2]["cause"] == "exited with status 3 (stderr: 'legacy failure')"


def test_legacy_block_on_failure(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                entry("PreToolUse", "exit 0", blockOnFailure=True),
                entry(
                    "PreToolUse", "echo 'tests must pass first' >&2; exit 1", blockOnFailure=True
                ),
                entry("PreToolUse", "touch never-runs"),
            ]
        }
    )
    result = ax.session().fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision, result.cause, result.reason, result.source) == (
        Verdict.DENY,
        Cause.BLOCK_ON_FAILURE,
        "tests must pass first",
        "hooks[1]",
    )
    assert not (ax.workspace / "never-runs").exists()
    assert ax.warnings() == []  # a deliberate block: the decision line tells
    assert (
        ax.metrics.value(
            "hook_lifecycle_decisions_total",
            event="PreToolUse",
            decision="deny",
            cause="block_on_failure",
        )
        == 1
    )


def test_legacy_timeout_with_block_on_failure_blocks_fail_safe(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("UserPromptSubmit", "sleep 30", blockOnFailure=True, timeout=1)]})
    result = ax.session().fire("UserPromptSubmit", {"prompt": "hi"})
    assert (result.decision, result.cause) == (Verdict.DENY, Cause.BLOCK_ON_FAILURE)
    assert [(w["kind"], w["outcome"]) for w in ax.warnings()] == [("fail_safe", "timeout")]


def test_matchers_pick_entries(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                entry("PreToolUse", "exit 1", matcher="edit|write", blockOnFailure=True),
                entry("PreToolUse", "exit 1", matcher="mcp_*", blockOnFailure=True),
            ]
        }
    )
    session = ax.session()
    assert session.fire("PreToolUse", {"tool": "bash", "args": {}}).cause is Cause.NO_HOOKS
    assert session.fire("PreToolUse", {"tool": "write", "args": {}}).source == "hooks[0]"
    assert session.fire("PreToolUse", {"tool": "mcp_fs_read", "args": {}}).source == "hooks[1]"


def test_post_tool_use_feedback_from_both_decoders(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                entry("PostToolUse", "printf '\\n  legacy note  \\n'"),
                entry("PostToolUse", "echo ignored; exit 1"),
                cc(
                    "PostToolUse",
                    answer(
                        hookSpecificOutput={
                            "hookEventName": "PostToolUse",
                            "additionalContext": "context",
                        }
                    ),
                ),
                cc("PostToolUse", sh("echo 'type error in a.py' >&2", "exit 2")),
                cc("PostToolUse", answer(decision="block", reason="lint failed")),
            ]
        }
    )
    result = ax.session().fire(
        "PostToolUse", {"tool": "edit", "args": {}, "output": "Edit applied."}
    )
    assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.NON_BLOCKING)
    assert result.with_feedback("Edit applied.") == (
        "Edit applied.\n\n"
        '<hook_feedback event="PostToolUse">\n'
        "legacy note\n\ncontext\n\ntype error in a.py\n\nlint failed\n"
        "</hook_feedback>"
    )
    assert result.to_json("Edit applied.")["tool_result"] == result.with_feedback("Edit applied.")


def test_feedback_caps_with_real_hooks_and_multibyte_text(ax: AxEnv) -> None:
    noisy = ax.script("noisy.py", "import sys\nsys.stdout.write('ü€😀' * 5000)\n")
    ax.hooks({"hooks": [entry("PostToolUse", noisy) for _ in range(3)]})
    result = ax.session().fire("PostToolUse", {"tool": "edit", "args": {}, "output": "ok"})
    assert result.feedback is not None
    body = result.feedback.split("\n", 1)[1].rsplit("\n", 1)[0]
    assert len(body) <= 8000
    assert body.endswith("limit 8000]")
    assert body.count("[hook feedback truncated: 15000 characters, limit 4000]") == 1
    assert "\ufffd" not in body
    assert result.with_feedback("ok").startswith("ok\n\n<hook_feedback")


def test_stop_notices(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("Stop", "echo remember the changelog"), cc("Stop", "exit 2")]})
    result = ax.session().fire("Stop", {})
    assert (result.decision, result.notices) == (Verdict.ALLOW, ("remember the changelog",))
    assert [(w["kind"], w["outcome"]) for w in ax.warnings()] == [("hook_failure", "exit_2")]


def test_untrusted_project_hooks_do_not_run(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("PreToolUse", "touch ran; exit 1", blockOnFailure=True)]})
    for environ in (ax.environ(), ax.environ(AX_CODE_TRUST_PROJECT_CONFIG="true")):
        session = ax.session(environ=environ, trust_project=None)
        result = session.fire("PreToolUse", {"tool": "bash", "args": {}})
        assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.NO_HOOKS)
    assert not (ax.workspace / "ran").exists()
    causes = [w["cause"] for w in ax.warnings()]
    assert causes[0].endswith(
        "project hooks are off: after reviewing them, start the runner "
        "with AX_CODE_TRUST_PROJECT_CONFIG=1 or --trust-project-hooks"
    )
    assert causes[1] == "AX_CODE_TRUST_PROJECT_CONFIG is 'true', not '1', so it is ignored"
    trusted = ax.session(environ=ax.environ(AX_CODE_TRUST_PROJECT_CONFIG="1"), trust_project=None)
    assert trusted.fire("PreToolUse", {"tool": "bash", "args": {}}).cause is Cause.BLOCK_ON_FAILURE
    assert (ax.workspace / "ran").exists()


def test_skipped_events_run_nothing(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                entry("SessionStart", "touch started"),
                entry("UserPromptSubmit", "touch prompted"),
            ]
        }
    )
    session = ax.session()
    assert session.fire("SessionStart", {"parent_session_id": "ses_parent"}).cause is Cause.SKIPPED
    result = session.fire("UserPromptSubmit", {"prompt": "continue", "synthetic": True})
    assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.SKIPPED)
    session.close()
    assert not (ax.workspace / "started").exists()
    assert not (ax.workspace / "prompted").exists()


def test_convenience_methods_and_metrics(ax: AxEnv) -> None:
    ax.hooks(
        {
            "hooks": [
                entry("PostToolUse", "echo noted"),
                cc("UserPromptSubmit", answer(permissionDecision="allow")),
            ]
        }
    )
    session = ax.session()
    assert session.pre_tool_use("bash", {"command": "ls"}).cause is Cause.NO_HOOKS
    assert session.post_tool_use("bash", {"command": "ls"}, "a\n").with_feedback("a\n") == (
        'a\n\n\n<hook_feedback event="PostToolUse">\nnoted\n</hook_feedback>'
    )
    assert session.user_prompt_submit("hi").cause is Cause.ALLOWED
    assert (ax.runs("PostToolUse", "ok"), ax.runs("UserPromptSubmit", "allow")) == (1, 1)
    assert session.fire(AxEvent.STOP).cause is Cause.NO_HOOKS
