"""Claude Code compatibility of the AX Code dialect (issue 13), through the real ``hookrunner fire``.

* the payload Claude Code sends is accepted as is, for every event, and its
  fields reach claude-code hooks unchanged; the AX shape reaches them under
  Claude Code's names;
* matchers as Claude Code users write them (``Bash``, ``Edit|Write``,
  ``mcp__.*``) and AX Code's lower-case ids match the same calls;
* what Claude Code hooks return reaches the caller: prompt context,
  ``stop_hook_active``, ``tool_use_id``, a warning for an ignored Stop block.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.hookrunner.ax.conftest import AxEnv, cc
from tests.hookrunner.ax.realworld_support import (
    SESSION,
    answer,
    claude_payload,
    fire,
    warning_lines,
)
from tests.hookrunner.helpers import HOOKRUNNER

DUMP = "import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')\n"


def dumping(ax: AxEnv, event: str, matcher: str = "", **fields: Any) -> dict[str, Any]:
    line = f"{ax.script('dump.py', DUMP)} {ax.root / 'seen.jsonl'}"
    return cc(event, line, matcher=matcher, **fields)


def seen(ax: AxEnv) -> list[dict[str, Any]]:
    path = ax.root / "seen.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


TOOL = {"tool_name": "Bash", "tool_input": {"command": "npm test", "description": "Run tests"}}
# The fields of each event after Claude Code's common ones (hooks reference, "Hook input").
EVENTS: dict[str, dict[str, Any]] = {
    "PreToolUse": {**TOOL, "tool_use_id": "toolu_01"},
    "PostToolUse": {
        **TOOL,
        "tool_response": {"stdout": "ok", "stderr": "", "interrupted": False},
        "tool_use_id": "toolu_01",
    },
    "UserPromptSubmit": {"prompt": "Write a haiku", "prompt_id": "p_1"},
    "Stop": {"stop_hook_active": True, "last_assistant_message": "Done.", "reason": "end_turn",
             "timestamp": "2026-12-02T10:00:00Z"},
    "SubagentStop": {"stop_hook_active": False, "agent_id": "a1", "agent_type": "Explore",
                     "agent_transcript_path": "/root/.claude/projects/-w/a1.jsonl"},
    "PreCompact": {"trigger": "manual", "custom_instructions": "keep the API notes"},
}  # fmt: skip
OBSERVATION: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # event: (the fields Claude Code sends, the ones an observation-only hook gets)
    "SessionStart": ({"source": "startup", "model": "claude-sonnet-4-5"},) * 2,
    "SessionEnd": ({"reason": "prompt_input_exit"},) * 2,
    "PostCompact": ({"trigger": "auto", "compact_summary": "We talked about..."},
                    {"trigger": "auto"}),
    "Interrupt": ({"reason": "user"},) * 2,
    "PostToolUseFailure": (
        {**TOOL, "tool_use_id": "toolu_09", "error": "exit status 1", "is_interrupt": False},
        {"tool_name": "Bash", "tool_use_id": "toolu_09", "is_interrupt": False},
    ),
}  # fmt: skip


@pytest.mark.parametrize("event", list(EVENTS))
def test_the_claude_code_payload_reaches_claude_code_hooks_unchanged(ax: AxEnv, event: str) -> None:
    ax.hooks({"hooks": [dumping(ax, event)]})
    payload = claude_payload(ax, event, **EVENTS[event])
    done = fire(ax, event, payload)
    assert done.returncode == 0, done.stderr
    [document] = seen(ax)
    stamp = document.pop("timestamp")
    assert document == {k: v for k, v in payload.items() if k != "timestamp"}
    assert stamp == payload.get("timestamp", stamp)


@pytest.mark.parametrize("event", list(OBSERVATION))
def test_observation_events_accept_the_claude_code_payload(ax: AxEnv, event: str) -> None:
    sent, kept = OBSERVATION[event]
    ax.hooks({"hooks": [dumping(ax, event)]})
    done = fire(ax, event, claude_payload(ax, event, **sent))
    assert (done.returncode, answer(done)["cause"]) == (0, "queued")
    [document] = seen(ax)
    document.pop("timestamp")
    common = claude_payload(ax, event)
    assert document == {**common, **kept}


def test_the_ax_shape_reaches_claude_code_hooks_under_claude_code_names(ax: AxEnv) -> None:
    ax.hooks({"hooks": [dumping(ax, "PreToolUse", "Edit")]})
    payload = {
        "tool": "edit",
        "args": {
            "filePath": "src/a.ts",
            "oldString": "var",
            "newString": "let",
            "replaceAll": True,
        },
        "tool_call_id": "call_7",
        "message_id": "msg_3",
    }
    done = fire(ax, "PreToolUse", payload, "--session-id", "ses_ax")
    assert done.returncode == 0, done.stderr
    [document] = seen(ax)
    document.pop("timestamp")
    assert document == {
        "message_id": "msg_3",  # a field the runner does not read: unchanged
        "session_id": "ses_ax",
        "hook_event_name": "PreToolUse",
        "cwd": str(ax.workspace.resolve()),
        "tool_name": "Edit",
        "tool_input": {
            "file_path": "src/a.ts",
            "old_string": "var",
            "new_string": "let",
            "replace_all": True,
        },
        "tool_use_id": "call_7",
    }


LEGACY_DUMP = """import os, sys
seen = [os.environ["HOOK_TOOL"], os.environ["HOOK_ARGS_JSON"], sys.stdin.read()]
open(sys.argv[1], "w").write(" ".join(seen))
"""


def test_legacy_entries_and_hook_variables_keep_the_callers_vocabulary(ax: AxEnv) -> None:
    line = f"{ax.script('legacy.py', LEGACY_DUMP)} {ax.root / 'legacy'}"
    ax.hooks({"hooks": [{"event": "PreToolUse", "matcher": "bash", "command": line}]})
    done = fire(ax, "PreToolUse", claude_payload(ax, "PreToolUse", **EVENTS["PreToolUse"]))
    assert done.returncode == 0, done.stderr
    arguments = '{"command":"npm test","description":"Run tests"}'
    assert (ax.root / "legacy").read_text() == f"Bash {arguments} {arguments}"


@pytest.mark.parametrize(
    ("matcher", "tool", "fires"),
    [
        ("Bash", "bash", True),  # Claude Code's name, AX Code's call
        ("bash", "Bash", True),  # and the other way round
        ("Edit|Write", "write", True),
        ("Edit|Write", "Read", False),
        ("mcp__.*", "mcp__github__create_issue", True),
        ("mcp__.*", "Bash", False),
        ("mcp__github__.*", "mcp__gitlab__create_issue", False),
        ("Notebook.*", "NotebookEdit", True),
    ],
)
def test_claude_code_matchers(ax: AxEnv, matcher: str, tool: str, fires: bool) -> None:
    deny = 'echo \'{"permissionDecision": "deny", "reason": "no"}\''
    ax.hooks({"hooks": [cc("PreToolUse", deny, matcher=matcher)]})
    done = fire(ax, "PreToolUse", claude_payload(ax, "PreToolUse", tool_name=tool, tool_input={}))
    assert (done.returncode, answer(done)["decision"]) == ((1, "deny") if fires else (0, "allow"))


def test_validate_reports_a_matcher_that_can_match_no_tool(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("PreToolUse", "true", matcher="Bash(npm test)"),
                        cc("PreToolUse", "true", matcher="mcp__.*")]})  # fmt: skip
    done = subprocess.run(
        [HOOKRUNNER, "validate", "--workspace", str(ax.workspace), "--system-config",
         str(ax.root / "none.json")],
        capture_output=True, text=True, env=ax.environ(), timeout=30,
    )  # fmt: skip
    assert (done.returncode, done.stdout.splitlines()) == (
        1,
        [
            f"{ax.root / 'none.json'}: $: file does not exist",
            f"{ax.hooks_file}: $.hooks[0].matcher: regular expression 'Bash(npm test)' can match "
            "no tool name (tool names are letters, digits, _ - . :); the entry never runs",
        ],
    )


def test_prompt_context_plain_stdout_and_additional_context(ax: AxEnv) -> None:
    nested = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                     "additionalContext": "Today is Wednesday."}}  # fmt: skip
    ax.hooks(
        {
            "hooks": [
                cc("UserPromptSubmit", "echo '[git] Branch: main'"),
                cc("UserPromptSubmit", f"echo '{json.dumps(nested)}'"),
            ]
        }
    )
    done = fire(ax, "UserPromptSubmit", claude_payload(ax, "UserPromptSubmit", prompt="hi"))
    assert (done.returncode, answer(done)) == (
        0,
        {
            "event": "UserPromptSubmit",
            "decision": "allow",
            "cause": "allowed",
            "context": "[git] Branch: main\n\nToday is Wednesday.",
        },
    )


def test_prompt_output_that_starts_as_json_but_is_none_still_blocks(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("UserPromptSubmit", 'echo \'{"decision": "block"\'')]})
    done = fire(ax, "UserPromptSubmit", claude_payload(ax, "UserPromptSubmit", prompt="hi"))
    assert (done.returncode, answer(done)["cause"]) == (1, "malformed_output")


def test_stop_decision_block_is_warned_like_exit_2(ax: AxEnv) -> None:
    block = 'echo \'{"decision": "block", "reason": "run the tests"}\''
    ax.hooks({"hooks": [cc("Stop", block), cc("Stop", "echo 'also this' >&2; exit 2")]})
    done = fire(ax, "Stop", claude_payload(ax, "Stop", stop_hook_active=False))
    assert (done.returncode, answer(done)["notices"]) == (0, ["run the tests", "also this"])
    causes = [line.split(" cause=", 1)[1] for line in warning_lines(done)]
    assert causes == [
        '"answered {\\"decision\\": \\"block\\"}, but Stop cannot block; ignored"',
        '"exited with status 2, but Stop cannot block; ignored"',
    ]


@pytest.mark.parametrize(
    ("event", "payload", "message"),
    [
        ("PreToolUse", {"hook_event_name": "PostToolUse", "tool_name": "Bash"},
         "\"hook_event_name\" is \"PostToolUse\", not 'PreToolUse'"),
        ("PreToolUse", {"tool": "bash", "tool_name": "Read"},
         '"tool" and "tool_name" are the same field and disagree'),
        ("PreToolUse", {"tool_name": 3}, '"tool_name" must be a non-empty string'),
        ("PreToolUse", {"tool_name": "Bash", "tool_input": "ls"}, '"tool_input" must be an object'),
        ("PostToolUse", {"tool_name": "Bash", "tool_use_id": 7}, '"tool_use_id" must be a string'),
        ("Stop", {"stop_hook_active": "true"}, '"stop_hook_active" must be a boolean'),
        ("PreCompact", {"trigger": 1}, '"trigger" must be a string'),
    ],
)  # fmt: skip
def test_a_needed_field_of_the_wrong_type_is_a_clear_error(
    ax: AxEnv, event: str, payload: dict[str, Any], message: str
) -> None:
    ax.hooks({"hooks": [dumping(ax, event)]})
    done = fire(ax, event, {"session_id": SESSION, **payload})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1] == f"hookrunner: error: {message}"
    assert seen(ax) == []
