"""Issue 20, item 3: hooks run only programs the agent cannot have written.

The finding: only relative ``PATH`` entries were dropped, so an absolute entry
inside the workspace (``<ws>/.venv/bin``, ``<ws>/node_modules/.bin``) let the
agent plant ``python3``, which then ran as the runner's user instead of the
gate. Real sessions, real planted programs, real directories and modes.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce.programs import Dropped, filter_paths
from tests.hookrunner.helpers import Env, base_environ, command, pre_group, rule

GATE = 'import json\nprint(json.dumps({"decision": "deny", "reason": "gate says no"}))\n'
PLANTED = '#!/bin/sh\necho \'{"decision": "allow"}\'\n'
REAL_PYTHON3 = shutil.which("python3", path="/usr/bin:/bin")


def plant(directory: Path, name: str = "python3") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text(PLANTED)
    program.chmod(0o755)
    return program


def world_writable(tmp_path: Path) -> Path:
    directory = tmp_path / "shared-bin"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


@pytest.mark.parametrize("planted_in", [".venv/bin", "node_modules/.bin", "outside-0777"])
def test_a_planted_python3_does_not_replace_the_gate(
    env: Env, tmp_path: Path, planted_in: str
) -> None:
    assert REAL_PYTHON3 is not None
    gate = env.root / "gate.py"
    gate.write_text(GATE)
    env.hooks({"gate": pre_group(rule("", command(f"python3 {gate}")))}, system=True)
    where = world_writable(tmp_path) if planted_in == "outside-0777" else env.workspace / planted_in
    plant(where)
    environ = base_environ(PATH=f"{where}:/usr/bin:/bin")
    session = env.session(environ=environ, tool_user="root")
    decision = session.pre("code_execution", {"code": "ls"})
    assert (decision.allowed, decision.reason) == (False, "gate says no")
    [warning] = env.warnings()
    assert (warning["kind"], warning["variable"], warning["entry"]) == (
        "config",
        "PATH",
        str(where),
    )


def test_each_dropped_entry_is_warned_about_once(env: Env) -> None:
    inside = env.workspace / "bin"
    inside.mkdir()
    environ = base_environ(PATH=f"{inside}:.:{inside}:/usr/bin::/bin")
    env.session(environ=environ)
    dropped = [(w["variable"], w["entry"]) for w in env.warnings()]
    assert dropped == [("PATH", str(inside)), ("PATH", "."), ("PATH", "")]


def runner_dir(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / "runner" / name
    directory.mkdir(parents=True)
    return directory


def test_filter_paths_keeps_only_runner_owned_entries(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "runner").mkdir(mode=0o755)
    jdk, lib = runner_dir(tmp_path, "jdk"), runner_dir(tmp_path, "lib")
    jar = lib / "a.jar"
    jar.write_text("")
    open_jar = lib / "b.jar"
    open_jar.write_text("")
    open_jar.chmod(0o666)
    shared = world_writable(tmp_path)
    env = {
        "PATH": f"/usr/bin:{workspace}/.venv/bin:{shared}:bin:/bin",
        "CLASSPATH": f"{jar}:{open_jar}:{workspace}/lib.jar:.",
        "JAVA_HOME": str(jdk),
        "GEM_HOME": str(workspace / ".gems"),
        "GIT_SSH_COMMAND": f"{workspace}/ssh -o StrictHostKeyChecking=no",
        "EDITOR": "vim",
        "PAGER": "/usr/bin/less -R",
        "GOPATH": f"{shared}",
        "LANG": f"{workspace}",  # not a path-valued variable: left alone
    }
    kept, dropped = filter_paths(env, workspace)
    assert kept == {
        "PATH": "/usr/bin:/bin",
        "CLASSPATH": str(jar),
        "JAVA_HOME": str(jdk),
        "EDITOR": "vim",
        "PAGER": "/usr/bin/less -R",
        "LANG": str(workspace),
    }
    assert dropped == (
        Dropped("PATH", f"{workspace}/.venv/bin"),
        Dropped("PATH", str(shared)),
        Dropped("PATH", "bin"),
        Dropped("CLASSPATH", str(open_jar)),
        Dropped("CLASSPATH", f"{workspace}/lib.jar"),
        Dropped("CLASSPATH", "."),
        Dropped("GOPATH", str(shared)),
        Dropped("GEM_HOME", str(workspace / ".gems")),
        Dropped("GIT_SSH_COMMAND", f"{workspace}/ssh"),
    )


@pytest.mark.privileged
def test_a_directory_owned_by_the_tool_user_is_dropped(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    kept, dropped = filter_paths({"PATH": f"{theirs}:/usr/bin"}, workspace)
    assert (kept, dropped) == ({"PATH": "/usr/bin"}, (Dropped("PATH", str(theirs)),))
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755


def test_the_planted_program_really_would_have_run(env: Env) -> None:
    """The control: with the workspace entry kept, ``python3`` is the planted program."""
    where = plant(env.workspace / ".venv" / "bin").parent
    done = subprocess.run(
        ["/bin/sh", "-c", "python3 -c 'print(1)'"],
        env={"PATH": f"{where}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == '{"decision": "allow"}\n'
