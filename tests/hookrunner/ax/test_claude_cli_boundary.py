"""The boundary in ``fire`` under the REAL Claude Code CLI (issue 44, D380-D381).

``hookrunner claude install --ax-config`` with the strict packs; the fake model
(``testbed.fake_model``) asks Claude Code 2.1.332 for Bash calls the packs cannot read
but the boundary stops: a forced push spelt with a variable (refused by the git guard,
the remote's ref unchanged), a ``.env`` read spelt with a variable (the mask: nothing of
the secret reaches the model), then a ``cd`` and a ``pwd`` (the directory persists from
one call to the next, as without the runner) and an ordinary command whose output and
failing exit status reach the model unchanged. The fixtures are test_claude_cli's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testbed.claude_code import HOOKRUNNER, ClaudeHome
from tests.hookrunner import gitrepos
from tests.hookrunner.ax.test_claude_cli import claude, netns, user  # noqa: F401 (fixtures)

pytestmark = pytest.mark.netns

SECRET = "API_KEY=sk-live-from-the-cli-0987"
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    return gitrepos.git(cwd, *args, env=GIT_ENV)


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "step"}}}


def prepare(home: ClaudeHome) -> Path:
    """The workspace a clone whose main diverged from its bare remote, with a .env."""
    ws, remote = home.workspace, home.root / "remote.git"
    gitrepos.diverged_clone(home.root, ws, remote, "main", env=GIT_ENV)
    (ws / ".env").write_text(SECRET + "\n")
    (ws / "sub").mkdir()
    return remote


def test_claude_codes_bash_runs_under_the_boundary(user: ClaudeHome) -> None:  # noqa: F811
    remote = prepare(user)
    before = git(remote, "rev-parse", "main")
    operator = user.root / "operator-ax.json"
    operator.write_text(json.dumps({"packs": ["block-force-push", "protect-env-files"]}))
    settings = user.home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(echo:*)"]}}))
    installed = subprocess.run(
        [HOOKRUNNER, "claude", "install", "--scope", "user", "--workspace", str(user.workspace),
         "--ax-config", str(operator)],
        capture_output=True, text=True, env=user.env, timeout=60,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    script = [
        bash("F=-f; git push $F origin main"),
        bash("X=v; cat .en$X; echo end"),
        bash("cd sub"),
        bash("pwd"),
        bash("printf 'out\\n'; echo err >&2; exit 3"),
        {"text": "all done"},
    ]
    run = user.run(script)
    assert run.code == 0, run.stderr
    pushed = run.tool_result("toolu_fake00")
    assert pushed["is_error"] is True
    assert "git guard (hookrunner): a forced push" in json.dumps(pushed)
    assert git(remote, "rev-parse", "main") == before
    masked = run.tool_result("toolu_fake01")
    assert masked["content"] == "end"
    assert "sk-live" not in json.dumps(run.requests)
    assert run.tool_result("toolu_fake03")["content"] == str(user.workspace / "sub")
    failed = run.tool_result("toolu_fake04")
    assert failed["is_error"] is True
    assert "out" in json.dumps(failed) and "err" in json.dumps(failed)
    assert "Exit code 3" in json.dumps(failed)
    assert (user.workspace / ".env").read_text() == SECRET + "\n"
    said = [m["message"]["content"][0] for m in run.stream if m["type"] == "assistant"]
    assert said[-1] == {"type": "text", "text": "all done"}
