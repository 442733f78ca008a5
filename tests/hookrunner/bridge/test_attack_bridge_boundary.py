"""The bridge's boundary attacked (atk-appr, issue 47 follow-up, D543): with the bridge on,
the admin token is readable outside the boundary, so a Bash call must not leave behind
what git runs there next. `core.fsmonitor` in the workspace's `.git/config` (or a hook in
`.git/hooks`, a command in `~/.gitconfig`) ran at the next `git status` outside — Claude
Code's own at its start, the user's, an editor's — and copied the token into the
workspace. Bash run as Claude Code 2.1.332 runs it (``test_fire_boundary``'s ``Claude``).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.hookrunner.ax.test_fire_boundary import Claude
from tests.hookrunner.bridge.test_fire_token import TOKEN, bridged, claude  # noqa: F401

pytestmark = pytest.mark.privileged


def _git_status_outside(claude: Claude) -> None:  # noqa: F811 (the fixture's type)
    subprocess.run(
        ["git", "status", "--short"], cwd=claude.workspace, env=claude.env,
        capture_output=True, timeout=60,
    )  # fmt: skip


def test_a_bash_call_cannot_plant_what_git_runs_outside_the_boundary(
    claude: Claude,  # noqa: F811 (the fixture)
) -> None:
    token = bridged(claude)
    (claude.home / ".gitconfig").write_text("[user]\n\tname = a\n")
    leak = claude.workspace / "leak"
    steal = f"cat {token} > {leak}; false"
    for planted in (
        f"git config core.fsmonitor '{steal}'",
        f"printf '[core]\\n\\tfsmonitor = {steal}\\n' >> .git/config",
        f"printf '#!/bin/sh\\n{steal}\\n' > .git/hooks/post-index-change; "
        "chmod +x .git/hooks/post-index-change",
        f"git config --global core.fsmonitor '{steal}'",
    ):
        claude.bash(claude.updated(planted)["command"])
        _git_status_outside(claude)
        assert not leak.exists(), planted
    assert TOKEN not in (claude.workspace / ".git" / "config").read_text()


def test_the_agents_git_still_works_under_the_bridge(
    claude: Claude,  # noqa: F811 (the fixture)
) -> None:
    bridged(claude)
    (claude.workspace / "g").write_text("2\n")
    status, out, err, _ = claude.bash(
        claude.updated("git add g && git commit -qm two && git log --format=%s -1")["command"]
    )
    assert (status, out) == (0, "two\n"), err
    refused = claude.bash(claude.updated("git config user.name b")["command"])
    assert refused[0] != 0  # the configuration is read-only under the bridge (D543)
    assert subprocess.run(
        ["git", "config", "user.name"], cwd=claude.workspace, env=claude.env,
        capture_output=True, text=True, timeout=60,
    ).stdout == "a\n"  # fmt: skip
