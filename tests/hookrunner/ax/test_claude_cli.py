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
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.claude_code import (
    CONTEXT,
    HOOKRUNNER,
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
    # Claude Code's own words for an exit-2 block: "EVENT:TOOL hook error: [COMMAND]: REASON".
    assert blocked["is_error"] is True
    assert blocked["content"].startswith("PreToolUse:Bash hook error: [")
    assert blocked["content"].endswith("]: rm -rf is not allowed here\n")
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
