"""The boundary in ``fire`` (issue 44, D380-D382), end to end.

The PreToolUse JSON Claude Code sends for a Bash call goes to ``hookrunner fire
PreToolUse --claude-exit-codes`` (the packs configured); its ``updatedInput.command``
is then run the way Claude Code 2.1.332 runs a Bash command (``bash -c "eval CMD <
/dev/null && pwd -P >| CWDFILE"``, in the workspace): a forced push the packs cannot
see is refused by the git guard (the remote's refs unchanged), a ``.env`` read gets
the mask, an ordinary command's output, exit status and final directory are those of
the command run bare, and background runs still run.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner import cli
from sandbox_egress.hookrunner.enforce import bound, toolns
from testbed import procs
from tests.hookrunner.helpers import HOOKRUNNER

SECRET = "API_KEY=sk-live-not-really-0123456789"
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SHELL": "/bin/bash"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=ENV_HOME
    )
    return done.stdout.strip()


ENV_HOME = {**ENV, "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}


class Claude:
    """A workspace (a clone whose main diverged from its bare remote), the runner wired as
    Claude Code's PreToolUse hook with the strict packs, and Bash run as Claude Code does."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.remote, self.workspace = top / "remote.git", top / "ws"
        git(top, "init", "-q", "--bare", "-b", "main", str(self.remote))
        git(top, "init", "-q", "-b", "main", str(self.workspace))
        for key, value in (("user.email", "a@example.test"), ("user.name", "a")):
            git(self.workspace, "config", key, value)
        (self.workspace / "f").write_text("1\n")
        git(self.workspace, "add", "f")
        git(self.workspace, "commit", "-qm", "one")
        git(self.workspace, "remote", "add", "origin", str(self.remote))
        git(self.workspace, "push", "-q", "origin", "main")
        git(self.workspace, "commit", "-q", "--amend", "-m", "diverged")  # a push forces now
        (self.workspace / ".env").write_text(SECRET + "\n")
        (self.workspace / "sub").mkdir()
        self.operator = top / "operator-ax.json"
        self.operator.write_text(json.dumps({"packs": ["block-force-push", "protect-env-files"]}))
        self.home = top / "home"
        self.home.mkdir()
        self.env = {**ENV, "HOME": str(self.home), "TMPDIR": str(top)}

    def refs(self) -> str:
        return git(self.remote, "for-each-ref", "--format=%(refname) %(objectname)")

    def pre(self, command: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        payload = {
            "session_id": "ses_fire_boundary",
            "transcript_path": str(self.top / "transcript.jsonl"),
            "cwd": str(self.workspace),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "a test", **extra},
            "tool_use_id": "toolu_01boundary",
        }
        return subprocess.run(
            [HOOKRUNNER, "fire", "PreToolUse", "--claude-exit-codes",
             "--workspace", str(self.workspace), "--ax-config", str(self.operator)],
            input=json.dumps(payload), capture_output=True, text=True, env=self.env,
            cwd=self.workspace, timeout=60,
        )  # fmt: skip

    def updated(self, command: str, **extra: Any) -> dict[str, Any]:
        """The ``updatedInput`` of an allowed call (the answer is checked whole)."""
        done = self.pre(command, **extra)
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        specific = answer["hookSpecificOutput"]
        assert specific["hookEventName"] == "PreToolUse"
        assert specific["permissionDecision"] == "allow"
        updated = specific["updatedInput"]
        assert {k: v for k, v in updated.items() if k != "command"} == {
            "description": "a test",
            **extra,
        }
        assert updated["command"] != command
        return dict(updated)

    def bash(
        self, command: str, cwd: Path | None = None, snapshot: str = ""
    ) -> tuple[int, str, str, str]:
        """(status, stdout, stderr, the directory Claude Code records) of ``command`` run as
        Claude Code 2.1.332 runs a Bash call (``snapshot``: what its shell snapshot defines
        first, the user's functions, aliases and options)."""
        record = Path(tempfile.mkstemp(dir=self.top, prefix="cwd-")[1])
        script = f"eval {shlex.quote(command)} < /dev/null && pwd -P >| {shlex.quote(str(record))}"
        script = f"{snapshot}\n{script}" if snapshot else script
        done = subprocess.run(
            ["bash", "-c", script], cwd=cwd or self.workspace, capture_output=True,
            text=True, env=self.env, timeout=120,
        )  # fmt: skip
        where = record.read_text().strip()
        record.unlink()
        return done.returncode, done.stdout, done.stderr, where


@pytest.fixture
def claude() -> Iterator[Claude]:
    top = Path(tempfile.mkdtemp(prefix="hr-fire-boundary-"))
    try:
        yield Claude(top)
    finally:
        shutil.rmtree(top)


@pytest.mark.privileged
def test_a_forced_push_the_packs_cannot_see_is_refused_by_the_guard(claude: Claude) -> None:
    before = claude.refs()
    command = "F=-f; git push $F origin main"  # only the run time knows $F
    updated = claude.updated(command)
    status, out, err, _ = claude.bash(updated["command"])
    assert status == 1
    assert "git guard (hookrunner): a forced push" in err
    assert claude.refs() == before
    bare = claude.bash(command)  # without the boundary the same command forces
    assert bare[0] == 0
    assert claude.refs() != before


@pytest.mark.privileged
def test_a_push_the_packs_see_is_the_early_answer(claude: Claude) -> None:
    done = claude.pre("git push -f origin main")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "block-force-push: `git push -f`" in done.stderr


@pytest.mark.privileged
def test_a_fast_forward_push_goes_through(claude: Claude) -> None:
    git(claude.workspace, "reset", "-q", "--hard", "origin/main")
    (claude.workspace / "g").write_text("2\n")
    git(claude.workspace, "add", "g")
    git(claude.workspace, "commit", "-qm", "two")
    head = git(claude.workspace, "rev-parse", "HEAD")
    updated = claude.updated("git push -q origin main")
    status, _, err, _ = claude.bash(updated["command"])
    assert (status, err) == (0, "")
    assert claude.refs() == f"refs/heads/main {head}"


@pytest.mark.privileged
def test_an_env_read_gets_the_mask(claude: Claude) -> None:
    command = "X=.en; cat ${X}v; grep -r API_KEY . ; echo end"
    updated = claude.updated(command)
    status, out, _, _ = claude.bash(updated["command"])
    assert (status, out) == (0, "end\n")
    assert claude.bash(command)[1].startswith(SECRET)  # bare, the secret is read
    assert (claude.workspace / ".env").read_text() == SECRET + "\n"


ORDINARY = [
    "printf 'a b\\n'; echo to-stderr >&2; exit 3",
    'echo "$1|$#|$0" | tr a-z A-Z',
    "cd sub && pwd && ls -a ..",
    "cd sub; false",
    "for i in 1 2; do echo $i; done; cat <<'EOF'\nhere $HOME\nEOF",
    "echo 'é ü \\ \" `x`'; echo $'\\x01' | od -c | head -1",
    'test -n "$HOME" && echo home=$HOME; umask',
]


@pytest.mark.privileged
@pytest.mark.parametrize("command", ORDINARY)
def test_an_ordinary_command_is_unchanged(claude: Claude, command: str) -> None:
    updated = claude.updated(command)
    bounded = claude.bash(updated["command"])
    bare = claude.bash(command)
    assert bounded == bare


SNAPSHOT = (
    "shopt -s expand_aliases extglob\n"
    'greet() { echo "hello $1"; }\n'
    "alias ll='echo listing'\n"
    "export FROM_SNAPSHOT=yes\n"
)


@pytest.mark.privileged
def test_the_shell_snapshot_s_functions_aliases_and_options_are_there(claude: Claude) -> None:
    command = "greet you; ll; echo $FROM_SNAPSHOT; shopt -q extglob && echo extglob"
    updated = claude.updated(command)
    bounded = claude.bash(updated["command"], snapshot=SNAPSHOT)
    assert bounded == claude.bash(command, snapshot=SNAPSHOT)
    assert bounded[1] == "hello you\nlisting\nyes\nextglob\n"


@pytest.mark.privileged
def test_after_a_cd_the_whole_project_is_masked(claude: Claude) -> None:
    """A hook started in the directory the agent cd'd into masks Claude Code's project."""
    claude.env["CLAUDE_PROJECT_DIR"] = str(claude.workspace)
    done = subprocess.run(
        [HOOKRUNNER, "fire", "PreToolUse", "--claude-exit-codes", "--ax-config",
         str(claude.operator)],
        input=json.dumps({"session_id": "s", "hook_event_name": "PreToolUse",
                          "tool_name": "Bash", "tool_input": {"command": "X=v; cat ../.en$X"}}),
        capture_output=True, text=True, env=claude.env, cwd=claude.workspace / "sub", timeout=60,
    )  # fmt: skip
    updated = json.loads(done.stdout)["hookSpecificOutput"]["updatedInput"]["command"]
    status, out, _, _ = claude.bash(updated, cwd=claude.workspace / "sub")
    assert (status, out) == (0, "")


@pytest.mark.privileged
def test_a_cd_persists_from_one_call_to_the_next(claude: Claude) -> None:
    *_, where = claude.bash(claude.updated("cd sub")["command"])
    assert where == str(claude.workspace / "sub")
    status, out, _, _ = claude.bash(claude.updated("pwd")["command"], cwd=Path(where))
    assert (status, out) == (0, f"{claude.workspace / 'sub'}\n")


@pytest.mark.privileged
def test_a_background_command_still_runs(claude: Claude) -> None:
    flag = claude.workspace / "go"
    loop = f"while [ ! -e {flag} ]; do sleep 0.05; done"
    command = f"X=v; ({loop}; cat .en$X; echo ran) > bg.txt 2>&1 &"
    updated = claude.updated(command)
    status, out, _, _ = claude.bash(updated["command"])
    assert (status, out) == (0, "")
    flag.touch()  # only now, after the call returned, does the background run go on
    assert procs.written(claude.workspace / "bg.txt", "ran\n") == "ran\n"  # still masked


@pytest.mark.privileged
def test_run_in_background_keeps_its_flag_and_runs(claude: Claude) -> None:
    updated = claude.updated("sleep 0.2; echo later > later.txt", run_in_background=True)
    assert updated["run_in_background"] is True
    child = subprocess.Popen(
        ["bash", "-c", f"eval {shlex.quote(updated['command'])} < /dev/null"],
        cwd=claude.workspace, env=claude.env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert procs.written(claude.workspace / "later.txt", "later\n") == "later\n"


@pytest.mark.privileged
def test_the_original_command_reaches_the_shell_whatever_its_bytes(claude: Claude) -> None:
    command = "printf '%s\\n' \"'\" '\"' '$(x)' '`y`' '\\' \"$'\\n'\" '%%' '}' '{ 4>&1; }'"
    updated = claude.updated(command)
    assert claude.bash(updated["command"]) == claude.bash(command)


def test_other_tools_are_not_rewritten(claude: Claude) -> None:
    payload = {
        "session_id": "s",
        "hook_event_name": "PreToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": str(claude.workspace / "f")},
    }
    done = subprocess.run(
        [HOOKRUNNER, "fire", "PreToolUse", "--claude-exit-codes",
         "--workspace", str(claude.workspace), "--ax-config", str(claude.operator)],
        input=json.dumps(payload), capture_output=True, text=True, env=claude.env, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")


def test_the_boundary_entry_refuses_a_malformed_call() -> None:
    entry = [os.path.join(os.path.dirname(HOOKRUNNER), "python"), "-I", "-m"]
    entry.append("sandbox_egress.hookrunner.enforce.bound")
    for args in ([], ["--workspace", "/"], ["--workspace", "/", "not base64!"]):
        done = subprocess.run([*entry, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 126
        assert "hookrunner boundary:" in done.stderr
        assert "the command was not run" in done.stderr


# --- without a boundary (no root's namespace, no user namespace): said, nothing rewritten ---


class Stdin:
    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def fire_in_process(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    claude: Claude,
    command: str,
) -> tuple[int, str, str]:
    payload = {"session_id": "ses_no_boundary", "hook_event_name": "PreToolUse",
               "tool_name": "Bash", "tool_input": {"command": command}}  # fmt: skip
    monkeypatch.setattr(sys, "stdin", Stdin(json.dumps(payload).encode()))
    code = cli.main(["fire", "PreToolUse", "--claude-exit-codes", "--workspace",
                     str(claude.workspace), "--ax-config", str(claude.operator)])  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def test_without_a_boundary_the_first_call_says_so_and_nothing_is_rewritten(
    claude: Claude, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(toolns, "_probed", [None])
    monkeypatch.setattr(tempfile, "tempdir", str(claude.top))  # the per-session marker
    monkeypatch.setattr(os, "environ", {**claude.env})
    code, out, err = fire_in_process(monkeypatch, capsys, claude, "echo hi")
    assert code == 0
    answer = json.loads(out)
    assert "hookSpecificOutput" not in answer  # nothing to run the command under
    assert answer["systemMessage"].startswith(
        "hookrunner: no boundary for Claude Code's Bash tool: "
    )
    assert "git is not guarded and .env files are not masked" in answer["systemMessage"]
    assert answer["systemMessage"] in err
    assert fire_in_process(monkeypatch, capsys, claude, "echo hi") == (0, "", "")  # once
    code, out, err = fire_in_process(monkeypatch, capsys, claude, "F=-f; git push $F")
    assert (code, out) == (2, "")  # the packs are told nothing: what they cannot read is refused
    assert "block-force-push: `git push $F` is only known when the shell runs it" in err


def test_without_a_boundary_install_says_so_before_it_changes_anything(
    claude: Claude, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(toolns, "_probed", [None])
    monkeypatch.setenv("HOME", str(claude.home))
    settings = claude.workspace / ".claude" / "settings.json"
    code = cli.main(["claude", "install", "--scope", "project", "--workspace",
                     str(claude.workspace), "--runner", HOOKRUNNER])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0
    first = err.splitlines()[0]
    assert first.startswith("hookrunner: warning: no boundary for Claude Code's Bash tool: ")
    assert "git is not guarded and .env files are not masked" in first
    assert settings.exists()


@pytest.mark.privileged
def test_agent_commands_pass_in_fire_with_the_boundary(claude: Claude) -> None:
    """The false-refusal corpus through the real ``fire`` path (a sample: each call is a
    runner and two pack processes): none refused, every one answered with the boundary."""
    from tests.hookrunner.ax.test_false_refusals import agent_commands

    every = agent_commands()
    sample = every[:: max(1, len(every) // 12)]
    refused = [(c, claude.pre(c)) for c in sample]
    refused = [(c, done.stderr) for c, done in refused if done.returncode != 0]
    assert refused == []


@settings(max_examples=200, deadline=None)
@given(command=st.text(), workspace=st.sampled_from(["/ws", "/a b/c'd", "/x\n$y"]))
def test_the_wrapping_gives_back_the_command_it_wrapped(command: str, workspace: str) -> None:
    wrapped = bound.shell_command(command, Path(workspace))
    assert bound.original(wrapped) == command
    assert bound.original(wrapped + "; git push -f") is None
    assert bound.original(command) is None or command == wrapped


def test_post_tool_use_hooks_see_the_command_the_agent_wrote(claude: Claude) -> None:
    """Claude Code's PostToolUse carries the updatedInput it ran; the runner's hooks are
    given the agent's own command back (a logger, require-tests-on-stop)."""
    log = claude.top / "seen.log"
    script = claude.top / "log.py"
    script.write_text(
        "import json, sys\n"
        "d = json.load(sys.stdin)\n"
        f"open({str(log)!r}, 'a').write(d['tool_input']['command'] + '\\n')\n"
    )
    hook = {"event": "PostToolUse", "matcher": "Bash", "protocol": "claude-code",
            "command": f"{sys.executable} -I -S {script}"}  # fmt: skip
    claude.operator.write_text(json.dumps({"hooks": [hook]}))
    wrapped = bound.shell_command("pytest -q tests", claude.workspace)
    payload = {"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash",
               "tool_input": {"command": wrapped, "description": "d"},
               "tool_response": {"stdout": "ok", "stderr": "", "interrupted": False}}  # fmt: skip
    done = subprocess.run(
        [HOOKRUNNER, "fire", "PostToolUse", "--claude-exit-codes",
         "--workspace", str(claude.workspace), "--ax-config", str(claude.operator)],
        input=json.dumps(payload), capture_output=True, text=True, env=claude.env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "pytest -q tests\n"
