"""Issue 20, item 3: the format-after-edit pack never runs a workspace binary as the runner's user.

The finding: the pack preferred ``<ws>/node_modules/.bin/prettier`` and ran it
as the runner's user (root). Now formatters run as the tool user when the
runner is root (the workspace's prettier only then), and as the runner's own
user only when that is the tool user too, never from the workspace.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.packs.formatters import (
    PRETTIER,
    RunAs,
    find_formatter,
    who_formats,
)
from sandbox_egress.hookrunner.ax.session import AxSession
from sandbox_egress.hookrunner.metrics import HookMetrics
from tests.hookrunner.helpers import base_environ

NOBODY = pwd.getpwnam("nobody")


def planted_prettier(workspace: Path, marker: Path) -> Path:
    """A workspace prettier that records who ran it (the agent could have written it)."""
    program = workspace / "node_modules" / ".bin" / "prettier"
    program.parent.mkdir(parents=True)
    program.write_text(f"#!/bin/sh\nid -u >> {marker}\n")
    program.chmod(0o755)
    return program


@pytest.fixture
def open_top() -> Iterator[Path]:
    """A directory under /tmp that nobody can enter (pytest's own are 0700)."""
    top = Path(tempfile.mkdtemp(prefix="hr-fmt-"))
    try:
        top.chmod(0o755)
        yield top
    finally:
        shutil.rmtree(top)


def edit(top: Path, workspace: Path, **environ: str) -> None:
    (workspace / ".ax-code").mkdir(exist_ok=True)
    (workspace / ".ax-code" / "hooks.json").write_text('{"packs": ["format-after-edit"]}')
    (workspace / "app.js").write_text("let  x=1\n")
    env = base_environ(XDG_STATE_HOME=str(top / "state"), PATH="/usr/bin:/bin", **environ)
    with AxSession(workspace, environ=env, trust_project=True, metrics=HookMetrics()) as session:
        session.fire("PostToolUse", {"tool": "write", "args": {"filePath": "app.js"}})


def test_the_workspace_prettier_never_runs_as_the_runners_user(open_top: Path) -> None:
    workspace = open_top / "ws"
    workspace.mkdir()
    marker = open_top / "ran-as"
    planted_prettier(workspace, marker)
    edit(open_top, workspace, HOOKRUNNER_TOOL_USER=pwd.getpwuid(os.geteuid()).pw_name)
    assert not marker.exists()


@pytest.mark.privileged
def test_the_workspace_prettier_runs_as_the_tool_user(open_top: Path) -> None:
    workspace = open_top / "ws"
    workspace.mkdir()
    os.chown(workspace, NOBODY.pw_uid, NOBODY.pw_gid)
    marker = open_top / "ran-as"
    marker.touch(mode=0o666)
    marker.chmod(0o666)
    planted_prettier(workspace, marker)
    edit(open_top, workspace)
    assert marker.read_text() == f"{NOBODY.pw_uid}\n"


@pytest.mark.parametrize(
    ("euid", "environ", "expected"),
    [
        (1000, {}, RunAs(None, None)),
        (1000, {"HOOKRUNNER_TOOL_USER": "nobody"}, RunAs(None, None)),
        (0, {}, RunAs(NOBODY.pw_uid, NOBODY.pw_gid)),
        (0, {"HOOKRUNNER_TOOL_USER": str(NOBODY.pw_uid)}, RunAs(NOBODY.pw_uid, NOBODY.pw_gid)),
        (0, {"HOOKRUNNER_TOOL_USER": "root"}, RunAs(None, None)),
        (0, {"HOOKRUNNER_TOOL_USER": "no-such-user-x"},
         "the runner is root and the tool user 'no-such-user-x' does not exist: no formatter runs"),
    ],
    ids=["unprivileged", "unprivileged-named", "root-default", "root-by-uid", "root-as-root", "unknown"],
)  # fmt: skip
def test_who_formats(euid: int, environ: dict[str, str], expected: RunAs | str) -> None:
    assert who_formats(environ, euid) == expected


def test_the_workspace_prettier_is_found_only_for_a_switched_user(tmp_path: Path) -> None:
    local = planted_prettier(tmp_path, tmp_path / "m")
    file = str(tmp_path / "a.js")
    assert find_formatter(file, str(tmp_path), "/nonexistent") is None
    assert find_formatter(file, str(tmp_path), "/nonexistent", RunAs(None, None)) is None
    switched = find_formatter(file, str(tmp_path), "/nonexistent", RunAs(65534, 65534))
    assert switched == (PRETTIER, str(local))
