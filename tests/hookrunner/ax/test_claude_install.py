"""`hookrunner claude install`: one command wires the runner as Claude Code's hook, and the
user's own hooks keep running with their semantics (issue 35, D229).

Claude Code itself cannot run here without a model; it is played by what it does with a
settings file (the commands reach the runner through its quick client, ax.quickclient): for each event, `/bin/sh -c COMMAND` of each entry with the event's payload
on stdin (the recorded payloads of tests/hookrunner/ax/claude/payloads.json), reading exit
2 and stderr as a block and validating stdout against its hook-output schema.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.claudeinstall import CLAUDE_EVENTS, MOVED_NAME
from sandbox_egress.hookrunner.ax.firebound import boundary_here
from sandbox_egress.hookrunner.enforce.bound import original as unbounded
from testbed.claude_code import stop_warm_runners
from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.test_claude_output import CLAUDE_OUTPUT
from tests.hookrunner.ax.test_claude_settings import (
    BLOCK_RM,
    PAYLOADS,
    Claude,
    settings,
)
from tests.hookrunner.helpers import HOOKRUNNER


class Installed(Claude):
    """Claude Code's environment, with a runtime directory of the test's own: the warm
    runner the installed command starts there is ended afterwards."""

    def __init__(self, ax: AxEnv) -> None:
        super().__init__(ax)
        self.run_dir = Path(tempfile.mkdtemp(prefix="hr-"))  # short: a socket path's limit
        self.env = ax.environ(HOME=str(self.home), XDG_RUNTIME_DIR=str(self.run_dir))


@pytest.fixture
def claude(ax: AxEnv) -> Iterator[Installed]:
    installed = Installed(ax)
    yield installed
    stop_warm_runners(installed.run_dir)
    shutil.rmtree(installed.run_dir, ignore_errors=True)


DENY_RM = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "rm -rf is not allowed here",
    }
}
LOG_EVENT = (
    "import json, sys\n"
    "d = json.load(sys.stdin)\n"
    "open(sys.argv[1], 'a').write(d['hook_event_name'] + '\\n')\n"
)


def four_hooks(claude: Claude) -> dict[str, Any]:
    """A user's settings.json: a PreToolUse guard, a PostToolUse and a Stop hook that log,
    a Notification hook, and keys that are not hooks."""
    logger = claude.ax.script("log_event.py", LOG_EVENT) + f" {claude.log}"
    blocker = claude.ax.script("block_rm.py", BLOCK_RM) + f" {claude.log}"
    return settings(
        ("PreToolUse", "Bash", blocker),
        ("PostToolUse", "Write|Edit", logger),
        ("Stop", "", logger),
        ("Notification", "", "notify-send 'Claude needs you'"),
        permissions={"allow": ["Bash(npm test)"]},
        model="opus",
    )


def claude_code_fires(claude: Installed, event: str, payload: dict[str, Any]) -> list[Any]:
    """What Claude Code does for `event`: run every matching entry of the user settings."""
    document = json.loads((claude.home / ".claude" / "settings.json").read_text())
    done = []
    for group in document["hooks"].get(event, []):
        for hook in group["hooks"]:
            ran = subprocess.run(
                ["/bin/sh", "-c", hook["command"]],
                input=json.dumps(payload),
                capture_output=True,
                text=True,
                env=claude.env,
                timeout=60,
            )
            if ran.stdout.strip():
                CLAUDE_OUTPUT.validate(json.loads(ran.stdout))  # no "hook JSON output" error
            done.append(ran)
    return done


def install(claude: Installed, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOOKRUNNER, "claude", *more, "--workspace", str(claude.ax.workspace)],
        capture_output=True,
        text=True,
        env=claude.env,
        timeout=60,
    )


def test_one_command_wires_the_runner_and_the_users_hooks_keep_working(claude: Installed) -> None:
    original = four_hooks(claude)
    path = claude.write("user", original)
    done = install(claude, "install")
    assert done.returncode == 0, done.stderr
    document = json.loads(path.read_text())
    # Every event the runner fires is the runner; Notification stays Claude Code's own.
    assert sorted(document["hooks"]) == sorted([*CLAUDE_EVENTS, "Notification"])
    assert document["hooks"]["Notification"] == original["hooks"]["Notification"]
    assert (document["permissions"], document["model"]) == (original["permissions"], "opus")
    moved = json.loads((path.parent / MOVED_NAME).read_text())
    assert sorted(moved["hooks"]) == ["PostToolUse", "PreToolUse", "Stop"]

    # The user's guard still blocks, through the runner, with its own words (D390).
    (blocked,) = claude_code_fires(claude, "PreToolUse", PAYLOADS["PreToolUse"])
    assert (blocked.returncode, json.loads(blocked.stdout)) == (0, DENY_RM)
    ls = {**PAYLOADS["PreToolUse"], "tool_input": {"command": "ls"}}
    (allowed,) = claude_code_fires(claude, "PreToolUse", ls)
    assert allowed.returncode == 0
    if boundary_here(os.environ):  # allowed: the command comes back under the boundary (D380)
        specific = json.loads(allowed.stdout)["hookSpecificOutput"]
        assert specific["permissionDecision"] == "allow"
        assert unbounded(specific["updatedInput"]["command"]) == "ls"
    else:  # no boundary here (no capabilities): allowed as it is, the notice once (D382)
        assert "updatedInput" not in allowed.stdout
    # A PostToolUse of Write runs the user's hook; one of Bash does not match it.
    write = {**PAYLOADS["PostToolUse"], "tool_name": "Write", "tool_input": {"file_path": "a"}}
    (posted,) = claude_code_fires(claude, "PostToolUse", write)
    assert posted.returncode == 0
    (stopped,) = claude_code_fires(claude, "Stop", PAYLOADS["Stop"])
    assert stopped.returncode == 0
    assert claude.runs() == ["PreToolUse", "PreToolUse", "PostToolUse", "Stop"]


def test_install_twice_changes_nothing_and_uninstall_restores(claude: Installed) -> None:
    original = four_hooks(claude)
    path = claude.write("user", original)
    assert install(claude, "install").returncode == 0
    first = (path.read_text(), (path.parent / MOVED_NAME).read_text())
    assert install(claude, "install").returncode == 0
    assert (path.read_text(), (path.parent / MOVED_NAME).read_text()) == first
    backup = path.with_name("settings.json.hookrunner-backup")
    assert json.loads(backup.read_text()) == original
    assert install(claude, "uninstall").returncode == 0
    assert json.loads(path.read_text()) == original
    assert not (path.parent / MOVED_NAME).exists()


def test_a_hook_added_after_install_is_moved_by_the_next_install(claude: Installed) -> None:
    path = claude.write("user", four_hooks(claude))
    assert install(claude, "install").returncode == 0
    document = json.loads(path.read_text())
    document["hooks"]["PreToolUse"].append(
        {"matcher": "Edit", "hooks": [{"type": "command", "command": "true"}]}
    )
    path.write_text(json.dumps(document))
    assert install(claude, "install").returncode == 0
    moved = json.loads((path.parent / MOVED_NAME).read_text())
    assert [g["matcher"] for g in moved["hooks"]["PreToolUse"]] == ["Bash", "Edit"]
    assert len(json.loads(path.read_text())["hooks"]["PreToolUse"]) == 1


def test_a_settings_file_that_is_not_json_is_left_alone(claude: Installed) -> None:
    path = claude.home / ".claude" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    done = install(claude, "install")
    assert done.returncode == 2
    assert "not readable as JSON" in done.stderr and "nothing was changed" in done.stderr
    assert path.read_text() == "{not json"
    assert not (path.parent / MOVED_NAME).exists()
