"""Real-world Claude Code hooks (tests/hookrunner/ax/realworld/) through the real ``hookrunner fire``.

Each script is written in a style people publish for Claude Code and reads
Claude Code's input envelope; each is fired with the full payload Claude
Code sends, and the verdict, the reason and the feedback are checked exactly.
"""

from __future__ import annotations

import json
import subprocess

from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.realworld_support import answer, claude_payload, fire, hook, warning_lines


def bash_call(ax: AxEnv, command: str, description: str = "") -> dict[str, object]:
    return claude_payload(
        ax,
        "PreToolUse",
        tool_name="Bash",
        tool_input={"command": command, "description": description, "timeout": 120000},
        tool_use_id="toolu_01ABCDEF",
    )


def test_bash_command_validator_blocks_with_its_stderr(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PreToolUse", "bash_command_validator.py", "Bash")]})
    done = fire(ax, "PreToolUse", bash_call(ax, "grep -r TODO src", "Find TODOs"))
    assert done.returncode == 1
    assert answer(done) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "exit_2",
        "reason": "• Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
        "source": "hooks[0]",
    }
    allowed = fire(ax, "PreToolUse", bash_call(ax, "grep -r TODO src | head"))
    assert (allowed.returncode, answer(allowed)["cause"]) == (0, "allowed")


def test_permission_decision_deny(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PreToolUse", "deny_dangerous_rm.py", "Bash")]})
    done = fire(ax, "PreToolUse", bash_call(ax, "rm -rf ~"))
    assert done.returncode == 1
    assert answer(done) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "permission_deny",
        "reason": "Refusing to run `rm -rf ~`: it deletes the whole home or root directory.",
        "source": "hooks[0]",
    }
    assert fire(ax, "PreToolUse", bash_call(ax, "rm -rf build/")).returncode == 0


def test_permission_decision_ask_interactive_and_headless(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PreToolUse", "ask_before_push.sh", "Bash")]})
    payload = bash_call(ax, "git push origin main")
    asked = fire(ax, "PreToolUse", payload, "--interactive")
    assert asked.returncode == 1
    assert answer(asked) == {
        "event": "PreToolUse",
        "decision": "ask",
        "cause": "ask",
        "reason": "This pushes to a remote: git push origin main",
        "source": "hooks[0]",
    }
    headless = fire(ax, "PreToolUse", payload)
    assert headless.returncode == 1
    assert answer(headless)["reason"] == (
        "Permission to use Bash was rejected: a hook asked for interactive confirmation "
        "(This pushes to a remote: git push origin main) and this run has no one to ask."
    )
    assert fire(ax, "PreToolUse", bash_call(ax, "git status")).returncode == 0


def test_decision_block_on_pre_tool_use(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PreToolUse", "block_force_push.sh", "Bash")]})
    done = fire(ax, "PreToolUse", bash_call(ax, "git push --force origin main"))
    assert done.returncode == 1
    assert answer(done) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "decision_block",
        "reason": "Force pushes rewrite shared history. Push without --force, or ask a maintainer.",
        "source": "hooks[0]",
    }
    assert fire(ax, "PreToolUse", bash_call(ax, "git push origin main")).returncode == 0


def test_env_file_protector_for_file_tools_and_bash(ax: AxEnv) -> None:
    matcher = "Read|Edit|Write|MultiEdit|Bash"
    ax.hooks({"hooks": [hook("PreToolUse", "protect_env_files.py", matcher)]})
    read = claude_payload(
        ax,
        "PreToolUse",
        tool_name="Read",
        tool_input={"file_path": str(ax.workspace / ".env.local")},
        tool_use_id="toolu_02",
    )
    done = fire(ax, "PreToolUse", read)
    assert (done.returncode, answer(done)["cause"], answer(done)["reason"]) == (
        1,
        "exit_2",
        "Blocked: .env.local holds secrets; do not read or change it.",
    )
    cat = fire(ax, "PreToolUse", bash_call(ax, "cat .env"))
    assert (cat.returncode, answer(cat)["reason"]) == (
        1,
        "Blocked: this command touches a .env file, which holds secrets.",
    )
    example = {**read, "tool_input": {"file_path": str(ax.workspace / ".env.example")}}
    assert fire(ax, "PreToolUse", example).returncode == 0


def test_mcp_deny_hook_fires_for_mcp_tools(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PreToolUse", "deny_destructive_mcp.py", "mcp__.*")]})
    payload = claude_payload(
        ax,
        "PreToolUse",
        tool_name="mcp__github__delete_repository",
        tool_input={"owner": "acme", "repo": "site"},
        tool_use_id="toolu_03",
    )
    done = fire(ax, "PreToolUse", payload)
    assert done.returncode == 1
    assert answer(done) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "permission_deny",
        "reason": "MCP tool delete_repository on github is destructive; ask the user to do it.",
        "source": "hooks[0]",
    }
    listing = fire(ax, "PreToolUse", {**payload, "tool_name": "mcp__github__list_issues"})
    assert (listing.returncode, answer(listing)["cause"]) == (0, "allowed")


def test_post_tool_use_formatter_feedback_reaches_the_model(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PostToolUse", "format_python.sh", "Edit|Write|MultiEdit")]})
    source = ax.workspace / "app.py"
    source.write_text("x   =  {'a':1}\n")
    payload = claude_payload(
        ax,
        "PostToolUse",
        tool_name="Write",
        tool_input={"file_path": str(source), "content": "x   =  {'a':1}\n"},
        tool_response={"filePath": str(source), "success": True},
        tool_use_id="toolu_04",
    )
    done = fire(ax, "PostToolUse", payload)
    assert done.returncode == 0, done.stderr
    block = (
        '<hook_feedback event="PostToolUse">\n'
        "Formatted app.py with ruff format. Read it again before the next edit.\n"
        "</hook_feedback>"
    )
    response = json.dumps(payload["tool_response"], separators=(",", ":"))
    assert answer(done) == {
        "event": "PostToolUse",
        "decision": "allow",
        "cause": "non_blocking",
        "feedback": block,
        "tool_result": f"{response}\n\n{block}",
    }
    assert source.read_text() == 'x = {"a": 1}\n'
    again = fire(ax, "PostToolUse", payload)  # already formatted: nothing to say
    assert answer(again) == {"event": "PostToolUse", "decision": "allow", "cause": "non_blocking"}


def test_user_prompt_submit_decision_block(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("UserPromptSubmit", "block_secrets_in_prompt.py")]})
    key = "sk-ant-api03-" + "x" * 24
    done = fire(ax, "UserPromptSubmit", claude_payload(ax, "UserPromptSubmit", prompt=f"use {key}"))
    assert done.returncode == 1
    assert answer(done) == {
        "event": "UserPromptSubmit",
        "decision": "deny",
        "cause": "decision_block",
        "reason": "Your prompt contains what looks like an API key. Remove it and pass the key "
        "through an environment variable instead.",
        "source": "hooks[0]",
    }
    fine = fire(ax, "UserPromptSubmit", claude_payload(ax, "UserPromptSubmit", prompt="hi"))
    assert (fine.returncode, answer(fine)) == (
        0,
        {"event": "UserPromptSubmit", "decision": "allow", "cause": "allowed"},
    )


def test_user_prompt_submit_plain_stdout_is_context(ax: AxEnv) -> None:
    subprocess.run(["git", "init", "-q", "-b", "feature/login", str(ax.workspace)], check=True)
    (ax.workspace / "notes.txt").write_text("draft\n")
    ax.hooks({"hooks": [hook("UserPromptSubmit", "prompt_git_context.sh")]})
    payload = claude_payload(ax, "UserPromptSubmit", prompt="Fix the login form")
    done = fire(ax, "UserPromptSubmit", payload)
    assert done.returncode == 0, done.stderr
    assert answer(done) == {
        "event": "UserPromptSubmit",
        "decision": "allow",
        "cause": "allowed",
        "context": "Current branch: feature/login. Uncommitted files: 2.",
    }
    assert warning_lines(done) == []


def test_user_prompt_submit_additional_context(ax: AxEnv) -> None:
    (ax.workspace / ".claude").mkdir()
    (ax.workspace / ".claude" / "NOTES.md").write_text("Use pnpm, not npm.\n")
    ax.hooks({"hooks": [hook("UserPromptSubmit", "prompt_project_notes.py")]})
    done = fire(ax, "UserPromptSubmit", claude_payload(ax, "UserPromptSubmit", prompt="add dep"))
    assert done.returncode == 0, done.stderr
    assert answer(done)["context"] == "Project notes:\nUse pnpm, not npm."


def test_stop_hook_honours_stop_hook_active_and_its_block_is_warned(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("Stop", "stop_until_tests_pass.py")]})
    first = fire(ax, "Stop", claude_payload(ax, "Stop", stop_hook_active=False))
    reason = "The tests have not passed yet. Run `make test` and fix what fails before finishing."
    assert first.returncode == 0
    assert answer(first) == {
        "event": "Stop",
        "decision": "allow",
        "cause": "non_blocking",
        "notices": [reason],
    }
    [warning] = warning_lines(first)
    assert warning.startswith(
        "hookrunner: warning kind=hook_failure event=Stop type=command outcome=deny "
        "source=hooks[0] "
    )
    assert warning.endswith(
        'cause="answered {\\"decision\\": \\"block\\"}, but Stop cannot block; ignored"'
    )
    again = fire(ax, "Stop", claude_payload(ax, "Stop", stop_hook_active=True))
    assert answer(again) == {"event": "Stop", "decision": "allow", "cause": "non_blocking"}
    assert warning_lines(again) == []


def test_post_tool_use_failure_logger_reads_tool_use_id(ax: AxEnv) -> None:
    ax.hooks({"hooks": [hook("PostToolUseFailure", "log_tool_failures.sh", "Bash")]})
    payload = claude_payload(
        ax,
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={"command": "npm test", "description": "Run the tests"},
        tool_use_id="toolu_05",
        error="Command exited with non-zero status code 1",
        is_interrupt=False,
    )
    done = fire(ax, "PostToolUseFailure", payload)
    assert (done.returncode, answer(done)["cause"]) == (0, "queued")
    log = ax.workspace / ".claude" / "tool-failures.log"
    # The error text is tool output: observation-only payloads never carry it (source page).
    assert log.read_text() == "toolu_05 Bash false -\n"
    [warning] = warning_lines(done)
    assert warning == (
        'hookrunner: warning kind=payload event=PostToolUseFailure dropped="error,tool_input" '
        'cause="observation-only payloads carry ids, reasons and timestamps only"'
    )
