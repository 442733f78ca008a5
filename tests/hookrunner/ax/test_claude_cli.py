"""`hookrunner claude install` under the REAL Claude Code CLI (issue 35, D229, D240-D243).

The npm package `@anthropic-ai/claude-code` (its native binary) is installed by the test
into `.cache/claude-code` of the repository, once, with npm. Only the model is mocked:
`testbed.fake_model`, a local server speaking the Anthropic Messages API, scripted to ask
for Bash `echo hi`, then for a command the user's guard forbids, then to answer in text.
The CLI and the fake model run in a network namespace the test creates, with nothing but
its loopback (no traffic can go anywhere else), telemetry and updates switched off.

A user's settings.json holds four hooks: a PreToolUse guard (exit 2 and a reason on
`rm -rf`), a PostToolUse and a Stop logger, and a UserPromptSubmit hook that adds context.
After `hookrunner claude install`, `claude -p` must: run the allowed command, block the
forbidden one with the guard's reason reaching the model (in the next request the fake
model gets), run every one of the user's hooks once, and show no hook problem: Claude Code
2.1.x reports a hook's unusable answer (the runner's old `{"decision": "allow"}`) as a
`system` message tagged `hook_no_verdict` in its stream, and a failing hook as a
`hook_non_blocking_error` in its session transcript.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.claude_code import (
    CONTEXT,
    HOOKRUNNER,
    PY,
    SCRIPT,
    ClaudeHome,
    Run,
    claude_binary,
    stop_warm_runners,
)
from testbed.netns import Namespaces, netns_available

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def claude() -> Path:
    if (reason := netns_available()) is not None:
        pytest.fail(reason)
    return claude_binary()


@pytest.fixture
def netns() -> Iterator[str]:
    namespaces = Namespaces(f"cc{os.getpid() % 100000}")
    name = f"{namespaces.tag}m"
    try:
        namespaces.add_namespaces(name)
        yield name
    finally:
        assert namespaces.close() == []


@pytest.fixture
def user(tmp_path: Path, claude: Path, netns: str) -> Iterator[ClaudeHome]:
    home = ClaudeHome(tmp_path, claude, netns)
    yield home
    stop_warm_runners(home.run_dir)
    shutil.rmtree(home.run_dir, ignore_errors=True)


def assert_guarded(run: Run, workspace: Path) -> None:
    """The allowed call ran, the forbidden one was blocked with the guard's reason, each of
    the user's hooks ran once, and Claude Code showed no hook problem."""
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    assert run.hooks_ran == [
        "UserPromptSubmit", "PreToolUse echo hi", "PostToolUse echo hi",
        "PreToolUse rm -rf victim", "Stop",
    ]  # fmt: skip
    assert run.tool_result("toolu_fake00")["content"] == "hi"
    blocked = run.tool_result("toolu_fake01")
    # Claude Code's words for a hook's JSON deny: "EVENT:TOOL hook error: REASON", the
    # reason the guard's own text (issue 44: no command line of the runner before it).
    assert blocked["is_error"] is True
    assert blocked["content"] == "PreToolUse:Bash hook error: rm -rf is not allowed here"
    assert (workspace / "victim").is_dir()
    first = json.dumps(run.requests[0]["body"])
    assert f"UserPromptSubmit hook additional context: {CONTEXT}" in first
    assert run.hook_problems() == []
    said = [m["message"]["content"][0] for m in run.stream if m["type"] == "assistant"]
    assert said[-1] == {"type": "text", "text": "all done"}


def test_the_real_cli_runs_the_users_four_hooks_through_the_runner(user: ClaudeHome) -> None:
    settings = user.write_settings("user")
    done = user.install("user")
    assert done.returncode == 0, done.stderr
    installed = json.loads(settings.read_text())["hooks"]
    assert all("fire" in g[0]["hooks"][0]["command"] for g in installed.values())
    assert_guarded(user.run(SCRIPT), user.workspace)


def test_project_scope_moves_the_hooks_out_of_the_workspace(user: ClaudeHome) -> None:
    """The runner reads no hooks file the agent could write (a file in the workspace is
    refused, D191): project scope's moved hooks live under the user's ~/.claude. Before
    D240 they were moved into the workspace, and none of the user's hooks ran, the guard
    neither."""
    settings = user.write_settings("project")
    done = user.install("project")
    assert done.returncode == 0, done.stderr
    projects = user.home / ".claude" / "hookrunner-projects"
    (moved,) = projects.glob("workspace-*.json")
    assert json.loads(moved.read_text())["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    assert list(user.workspace.rglob("hookrunner*")) == []
    assert_guarded(user.run(SCRIPT), user.workspace)
    assert user.install("project").returncode == 0  # twice: the same file, unchanged
    assert list(projects.iterdir()) == [moved]
    undone = subprocess.run(
        [HOOKRUNNER, "claude", "uninstall", "--scope", "project", "--workspace", str(user.workspace)],
        capture_output=True, text=True, env=user.env, timeout=60,
    )  # fmt: skip
    assert undone.returncode == 0, undone.stderr
    assert json.loads(settings.read_text()) == user.four_hooks()
    assert not moved.exists()


# -- issue 44: what the user's hooks say reaches Claude Code, as without the runner ----------

ANSWERS = (
    "import json, sys\n"
    "d = json.load(sys.stdin)\n"
    "event = d['hook_event_name']\n"
    "open(sys.argv[1], 'a').write(event + ' ' + d.get('tool_input', {}).get('command', '') + '\\n')\n"
    "if event == 'SessionStart':\n"
    "    print(json.dumps({'hookSpecificOutput': {'hookEventName': 'SessionStart',\n"
    "                      'additionalContext': 'Session context: ' + d['source']}}))\n"
    "    sys.exit(0)\n"
    "c = d['tool_input']['command']\n"
    "out = {'hookEventName': 'PreToolUse'}\n"
    "if 'rewrite' in c:\n"
    "    out.update(permissionDecision='allow', updatedInput={'command': 'echo rewritten'})\n"
    "elif 'confirm' in c:\n"
    "    out.update(permissionDecision='ask', permissionDecisionReason='please confirm')\n"
    "elif 'forbid' in c:\n"
    "    print('forbidden by the user\\'s policy', file=sys.stderr); sys.exit(2)\n"
    "print(json.dumps({'hookSpecificOutput': out}))\n"
)
ANSWERED: list[dict[str, Any]] = [
    {"tool_use": {"name": "Bash", "input": {"command": "echo rewrite-me"}}},
    {"tool_use": {"name": "Bash", "input": {"command": "echo confirm-me"}}},
    {"tool_use": {"name": "Bash", "input": {"command": "echo forbid-me > forbidden"}}},
    {"text": "all done"},
]


def answering_hooks(user: ClaudeHome) -> dict[str, Any]:
    script = user.root / "scripts" / "answers.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(ANSWERS)
    command = f"{PY} -I -S {script} {user.log}"
    group = [{"matcher": "{}", "hooks": [{"type": "command", "command": command}]}]
    hooks = {
        "SessionStart": json.loads(json.dumps(group).replace("{}", "startup")),
        "PreToolUse": json.loads(json.dumps(group).replace("{}", "Bash")),
    }
    return {"hooks": hooks}


def seen(run: Run) -> tuple[Any, ...]:
    """What the model got: the SessionStart context and each tool result."""
    first = json.dumps(run.requests[0]["body"])
    context = "SessionStart hook additional context: Session context: startup" in first
    results = [run.tool_result(f"toolu_fake{i:02d}") for i in range(3)]
    return context, [(r["content"], r["is_error"]) for r in results], run.hooks_ran


def test_the_real_cli_gets_what_the_users_hooks_said_as_without_the_runner(
    user: ClaudeHome,
) -> None:
    """SessionStart context reaches the model, updatedInput the tool, an ask is Claude
    Code's to answer (headless: refused with the hook's reason), a block reason is the
    hook's own text: the same session, without and with the runner installed."""
    settings = user.home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps(answering_hooks(user)))
    alone = seen(user.run(ANSWERED))
    user.log.unlink()
    done = user.install("user")
    assert done.returncode == 0, done.stderr
    installed = user.run(ANSWERED)
    assert installed.code == 0, installed.stderr
    through = seen(installed)
    assert through[0] is alone[0] is True
    assert through[2] == alone[2] == [
        "SessionStart ", "PreToolUse echo rewrite-me", "PreToolUse echo confirm-me",
        "PreToolUse echo forbid-me > forbidden",
    ]  # fmt: skip
    assert through[1][:2] == alone[1][:2] == [("rewritten", False), ("please confirm", True)]
    # Claude Code alone shows the hook's command line; through the runner, the hook's text.
    assert alone[1][2] == (
        f"PreToolUse:Bash hook error: [{PY} -I -S {user.root / 'scripts' / 'answers.py'} "
        f"{user.log}]: forbidden by the user's policy\n",
        True,
    )
    assert through[1][2] == ("PreToolUse:Bash hook error: forbidden by the user's policy", True)
    assert not (user.workspace / "forbidden").exists()


def test_the_real_cli_is_blocked_when_the_runner_is_gone(user: ClaudeHome) -> None:
    """The clone's .venv disappears (its paths in the installed PreToolUse command lead
    nowhere): the call is blocked, not run (before issue 44: exit 127, and it ran)."""
    settings = user.write_settings("user")
    assert user.install("user").returncode == 0
    document = json.loads(settings.read_text())
    (entry,) = document["hooks"]["PreToolUse"][0]["hooks"]
    venv = str(Path(sys.executable).parent.parent)
    entry["command"] = entry["command"].replace(venv, venv + "-gone")
    settings.write_text(json.dumps(document))
    script = [
        {"tool_use": {"name": "Bash", "input": {"command": "touch pushed"}}},
        {"text": "all done"},
    ]
    run = user.run(script)
    assert run.code == 0, run.stderr
    blocked = run.tool_result("toolu_fake00")
    assert blocked["is_error"] is True
    assert blocked["content"].endswith(
        "hookrunner: the hook command failed (exit 127), so this call is blocked\n"
    )
    assert not (user.workspace / "pushed").exists()
