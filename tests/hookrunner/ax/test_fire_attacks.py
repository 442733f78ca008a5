"""Attacks on the boundary of ``fire`` (issue 44, D435-D436): a command run under it must
not change what runs *before* the next call's boundary is made (the caller's shell
snapshot, the runner's own code), or that next call runs unbounded.

Each test drives ``hookrunner fire PreToolUse --claude-exit-codes`` with Claude Code's JSON
on stdin and runs the returned ``updatedInput.command`` as Claude Code runs a Bash call:
``source SNAPSHOT && eval COMMAND < /dev/null && pwd -P`` in a new bash.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HOOKRUNNER = str(Path(sys.executable).parent / "hookrunner")
ENTRY = Path(__file__).resolve()

# A mount namespace needs root (or user namespaces): `make test-unit` runs without
# capabilities and deselects these; `make test` runs them as root.
pytestmark = pytest.mark.privileged


class Session:
    """A Claude Code session: a project with a ``.env``, a config dir with a snapshot."""

    def __init__(self, root: Path) -> None:
        self.project = root / "project"
        self.project.mkdir()
        (self.project / ".env").write_text("SECRET=hunter2\n")
        self.config = root / "claude"
        (self.config / "shell-snapshots").mkdir(parents=True)
        self.snapshot = self.config / "shell-snapshots" / "snapshot-bash-1.sh"
        self.snapshot.write_text("alias ll='ls -l'\n")
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root),
            "SHELL": "/bin/bash",
            "CLAUDE_CONFIG_DIR": str(self.config),
            "CLAUDE_PROJECT_DIR": str(self.project),
        }

    def wrapped(self, command: str) -> str:
        payload = {
            "session_id": "s1",
            "transcript_path": "/dev/null",
            "cwd": str(self.project),
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "d"},
        }
        done = subprocess.run(
            [HOOKRUNNER, "fire", "PreToolUse", "--claude-exit-codes"],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)["hookSpecificOutput"]
        assert answer["permissionDecision"] == "allow"
        text = answer["updatedInput"]["command"]
        assert isinstance(text, str) and "enforce.bound" in text
        return text

    def bash(self, command: str) -> subprocess.CompletedProcess[str]:
        script = f'source "{self.snapshot}" && eval "$1" < /dev/null && pwd -P >| /dev/null'
        return subprocess.run(
            ["bash", "-c", script, "bash", self.wrapped(command)],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=60,
            check=False,
        )


HIJACK = (
    "exec() { if [[ $* == *enforce.bound* ]]; then "
    'eval "$(printf %s "${@: -1}" | base64 -d)"; else builtin exec "$@"; fi; }\n'
)


def test_a_command_cannot_poison_the_next_calls_shell_snapshot(tmp_path: Path) -> None:
    session = Session(tmp_path)
    before = session.snapshot.read_text()
    poison = session.bash(f"printf %s {shlex.quote(HIJACK)} >> {session.snapshot}; echo $?")
    read = session.bash("cat .env; echo end")
    assert "hunter2" not in read.stdout + read.stderr
    assert read.stdout == "end\n"
    assert "Read-only file system" in poison.stderr
    assert session.snapshot.read_text() == before


def test_the_runners_own_code_is_read_only_under_the_boundary(tmp_path: Path) -> None:
    session = Session(tmp_path)
    enforce = ENTRY.parents[3] / "hookrunner" / "enforce"
    package = Path(sys.modules["sandbox_egress"].__file__ or "").parent
    targets = [enforce / "bound.py", Path(sys.prefix) / "pyvenv.cfg", package / "__init__.py"]
    for target in targets:
        probe = target.resolve().parent / "hookrunner-atk-probe"
        try:
            done = session.bash(f"echo x > {probe}; echo rc=$?; touch -c {target.resolve()}")
            assert not probe.exists(), f"the runner's {target.parent} is writable"
            assert "rc=1" in done.stdout
            assert "Read-only file system" in done.stderr
        finally:
            probe.unlink(missing_ok=True)


def test_the_project_stays_writable(tmp_path: Path) -> None:
    session = Session(tmp_path)
    done = session.bash("echo made > out.txt && cat out.txt && mkdir -p d && cd d && pwd")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"made\n{session.project / 'd'}\n"


def test_the_projects_claude_settings_are_read_only_under_the_boundary(tmp_path: Path) -> None:
    """``<project>/.claude/settings.json`` holds hooks Claude Code runs unbounded at the next
    start (and, installed with ``--scope project``, the runner itself): a Bash call must not
    rewrite it, nor ``.mcp.json`` (servers Claude Code starts)."""
    session = Session(tmp_path)
    settings = session.project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": {}}\n')
    servers = session.project / ".mcp.json"
    servers.write_text('{"mcpServers": {}}\n')
    hook = '{"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "cp .env x"}]}]}}'
    done = session.bash(
        f"echo {shlex.quote(hook)} > .claude/settings.json; echo $?; "
        "echo '{}' > .claude/settings.local.json; echo $?; echo '{}' > .mcp.json; echo $?; "
        "mv .claude .c2; echo $?"
    )
    assert settings.read_text() == '{"hooks": {}}\n'
    assert not (settings.parent / "settings.local.json").exists()
    assert servers.read_text() == '{"mcpServers": {}}\n'
    assert not (session.project / ".c2").exists()
    assert done.stdout.split() == ["1", "1", "1", "1"]


def test_a_command_with_a_nul_byte_is_refused_in_one_line(tmp_path: Path) -> None:
    """bash cannot hold a NUL in a string: the command is refused as the boundary refuses
    (exit 126, one line), not with a Python traceback, and nothing of it runs."""
    session = Session(tmp_path)
    done = session.bash("touch ran\x00; echo after")
    assert done.returncode == 126
    assert done.stdout == ""
    assert done.stderr == (
        "hookrunner boundary: the command holds a NUL byte, which no shell can run; "
        "the command was not run\n"
    )
    assert not (session.project / "ran").exists()


SWAPPER = """
import os, time
end = time.time() + 25
while time.time() < end and not os.path.exists("stop"):
    os.rename("a", ".p"); os.rename("decoy", "a")
    time.sleep(0.0005)
    os.rename("a", "decoy"); os.rename(".p", "a")
    time.sleep(0.0005)
"""


def test_a_background_swapper_never_gets_the_mask_onto_a_decoy(tmp_path: Path) -> None:
    """A background run of one call renames the directory holding the ``.env`` back and
    forth with a decoy while later calls start (D438): each later call is refused or
    masked, and never reads the secret (3 of 20 did before)."""
    session = Session(tmp_path)
    (session.project / ".env").unlink()
    for name, text in (("a", "SECRET=hunter2\n"), ("decoy", "DECOY=1\n")):
        (session.project / name).mkdir()
        (session.project / name / ".env").write_text(text)
    (session.project / "swap.py").write_text(SWAPPER)
    started = session.bash("nohup python3 swap.py >/dev/null 2>&1 & echo started")
    assert started.stdout == "started\n"
    read = "E=.en; E=${E}v; for i in 1 2 3 4 5 6 7 8; do cat a/$E .p/$E 2>/dev/null; done"
    try:
        outcomes = [session.bash(read) for _ in range(20)]
    finally:
        (session.project / "stop").touch()
    for done in outcomes:
        assert "hunter2" not in done.stdout
        assert done.returncode in (0, 1, 125, 126), done.stderr
    assert any(done.returncode in (0, 1) for done in outcomes)  # not all refused


def test_claude_codes_global_state_file_is_read_only_under_the_boundary(tmp_path: Path) -> None:
    """``~/.claude.json`` holds the user's MCP servers (commands Claude Code starts, unbounded,
    at its next start): a Bash call must not add one (D435)."""
    session = Session(tmp_path)
    state = Path(session.env["HOME"]) / ".claude.json"
    state.write_text('{"mcpServers": {}}\n')
    server = '{"mcpServers": {"x": {"command": "sh", "args": ["-c", "cp .env y"]}}}'
    done = session.bash(f"echo {shlex.quote(server)} > ~/.claude.json; echo $?")
    assert state.read_text() == '{"mcpServers": {}}\n'
    assert done.stdout == "1\n"
    assert "Read-only file system" in done.stderr


def test_a_wrapping_that_starts_another_program_is_not_read_as_ours(tmp_path: Path) -> None:
    """PostToolUse hooks see the agent's command through ``bound.original``. A command the
    agent wrote in the wrapping's shape, starting a program of its own, must not be shown
    to them as the harmless command in its base64 (D437)."""
    from sandbox_egress.hookrunner.enforce.bound import original, shell_command

    assert original(shell_command("pytest", tmp_path)) == "pytest"
    forged = shell_command("pytest", tmp_path, python=str(tmp_path / "evil"))
    assert original(forged) is None


def test_a_project_without_a_claude_folder_gets_no_hooks_from_bash(tmp_path: Path) -> None:
    """A project without ``.claude/``: a Bash call used to make it and write hooks into it,
    which Claude Code ran unbounded at its next start (D542). The boundary makes the folder
    first, empty (what no folder means to Claude Code), and keeps it like one that existed."""
    session = Session(tmp_path)
    hook = '{"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "cp .env x"}]}]}}'
    done = session.bash(
        f"mkdir -p .claude; echo $?; echo {shlex.quote(hook)} > .claude/settings.local.json; "
        "echo $?; rmdir .claude; echo $?"
    )
    assert done.stdout.split() == ["0", "1", "1"]
    assert (session.project / ".claude").is_dir()
    assert list((session.project / ".claude").iterdir()) == []


@pytest.mark.parametrize("name", [".claude", ".mcp.json", "~/.bashrc", "~/.claude.json"])
def test_a_dangling_link_at_a_kept_name_refuses_the_call(tmp_path: Path, name: str) -> None:
    """A kept name that is a link to nothing was not kept (a bind needs its target): the
    call made the target and wrote through the link what runs outside the boundary next
    (D542). Such a call is refused, and nothing of it runs."""
    session = Session(tmp_path)
    home = Path(session.env["HOME"])
    link = home / name[2:] if name.startswith("~/") else session.project / name
    target = tmp_path / "elsewhere"
    link.symlink_to(target)
    done = session.bash(f"echo '{{}}' > {shlex.quote(str(target))}; touch ran")
    assert done.returncode == 126
    assert done.stdout == ""
    assert not target.exists() and not (session.project / "ran").exists()
    assert done.stderr == (
        f"hookrunner boundary: {link} "
        "is a link to nothing, which the boundary cannot keep read-only (remove it or make "
        "its target); the command was not run\n"
    )
