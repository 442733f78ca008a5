"""Real-world Claude Code settings files, copied unchanged, through the real ``hookrunner fire``.

The files (tests/hookrunner/ax/realworld/settings/) are a user-level
``~/.claude/settings.json`` and a project ``.claude/settings.json`` as people
publish them; the project's scripts are the real-world hooks of
``realworld/``, placed in ``.claude/hooks/`` where such settings find them
through ``$CLAUDE_PROJECT_DIR``. Nothing else points the runner at them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.realworld_support import PATH, REALWORLD, answer, claude_payload
from tests.hookrunner.helpers import HOOKRUNNER

SETTINGS = REALWORLD / "settings"


class Installed:
    def __init__(self, ax: AxEnv) -> None:
        self.ax = ax
        self.home = ax.root / "home"
        (self.home / ".claude").mkdir(parents=True)
        shutil.copy(SETTINGS / "user-settings.json", self.home / ".claude" / "settings.json")
        project = ax.workspace / ".claude"
        (project / "hooks").mkdir(parents=True)
        shutil.copy(SETTINGS / "project-settings.json", project / "settings.json")
        for script in ("deny_dangerous_rm.py", "format_python.sh"):
            shutil.copy(REALWORLD / script, project / "hooks" / script)

    def fire(self, event: str, payload: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HOOKRUNNER, "fire", event, "--workspace", str(self.ax.workspace),
             "--trust-project-hooks"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.ax.environ(PATH=PATH, HOME=str(self.home)),
            timeout=60,
        )  # fmt: skip


@pytest.fixture
def installed(ax: AxEnv) -> Installed:
    return Installed(ax)


def bash(ax: AxEnv, command: str, description: str | None = None) -> dict[str, Any]:
    tool_input: dict[str, Any] = {"command": command}
    if description is not None:
        tool_input["description"] = description
    return claude_payload(
        ax, "PreToolUse", tool_name="Bash", tool_input=tool_input, tool_use_id="toolu_01"
    )


def test_the_bash_logger_logs_and_the_rm_guard_denies(installed: Installed) -> None:
    ax = installed.ax
    allowed = installed.fire("PreToolUse", bash(ax, "ls -la", "List files"))
    assert (allowed.returncode, answer(allowed)["cause"]) == (0, "allowed"), allowed.stderr
    denied = installed.fire("PreToolUse", bash(ax, "rm -rf ~"))
    assert denied.returncode == 1
    assert answer(denied) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "permission_deny",
        "reason": "Refusing to run `rm -rf ~`: it deletes the whole home or root directory.",
        "source": "project settings hooks.PreToolUse[0].hooks[0]",
    }
    log = (installed.home / ".claude" / "bash-command-log.txt").read_text()
    assert log == "ls -la - List files\nrm -rf ~ - No description\n"  # user hooks run first


def test_prettier_style_format_on_edit_gives_feedback(installed: Installed) -> None:
    ax = installed.ax
    source = ax.workspace / "app.py"
    source.write_text("x=[1,2 ,3]\n")
    payload = claude_payload(
        ax,
        "PostToolUse",
        tool_name="Write",
        tool_input={"file_path": str(source), "content": "x=[1,2 ,3]\n"},
        tool_response={"filePath": str(source), "success": True},
        tool_use_id="toolu_02",
    )
    done = installed.fire("PostToolUse", payload)
    assert done.returncode == 0, done.stderr
    assert answer(done)["feedback"] == (
        '<hook_feedback event="PostToolUse">\n'
        "Formatted app.py with ruff format. Read it again before the next edit.\n"
        "</hook_feedback>"
    )
    assert source.read_text() == "x = [1, 2, 3]\n"


def test_the_stop_notification_runs(installed: Installed) -> None:
    done = installed.fire("Stop", claude_payload(installed.ax, "Stop", stop_hook_active=False))
    assert (done.returncode, answer(done)["cause"]) == (0, "non_blocking")
    log = (installed.home / ".claude" / "notifications.log").read_text()
    assert log == "4b1c7f6e-2d0a-4c39-9a53-0f7c1e2b8d41 Claude Code has finished\n"


def test_the_files_validate_clean(installed: Installed) -> None:
    done = subprocess.run(
        [HOOKRUNNER, "validate", "--workspace", str(installed.ax.workspace)],
        capture_output=True,
        text=True,
        env=installed.ax.environ(PATH=PATH, HOME=str(installed.home)),
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert "settings.json" in done.stderr


def test_without_trust_only_the_user_file_runs(installed: Installed) -> None:
    done = subprocess.run(
        [HOOKRUNNER, "fire", "PreToolUse", "--workspace", str(installed.ax.workspace)],
        input=json.dumps(bash(installed.ax, "rm -rf ~")),
        capture_output=True,
        text=True,
        env=installed.ax.environ(PATH=PATH, HOME=str(installed.home)),
        timeout=60,
    )
    assert (done.returncode, answer(done)["cause"]) == (0, "allowed")
    assert Path(installed.home / ".claude" / "bash-command-log.txt").exists()
    assert ".claude/settings.json: project hooks are off" in done.stderr
