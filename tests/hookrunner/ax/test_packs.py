"""The five packs, each through a real session and real child processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.model import Cause, Verdict
from sandbox_egress.hookrunner.ax.packs.catalogue import pack_command
from tests.hookrunner.ax.conftest import AxEnv

VENV_BIN = str(Path(sys.executable).parent)


def pre(ax: AxEnv, tool: str, args: dict, **kwargs: object):
    return ax.session(**kwargs).fire("PreToolUse", {"tool": tool, "args": args})


@pytest.mark.parametrize(
    ("tool", "args", "spelling"),
    [
        ("bash", {"command": "git push --force-with-lease"}, "git push --force-with-lease"),
        ("bash", {"command": "git push origin +main"}, "git push +main"),
        ("Bash", {"command": "git push -fu origin feature"}, "git push -fu"),
        ("code_execution", {"code": "cd repo && git push -f", "language": "bash"}, "git push -f"),
        ("code_execution", {"code": "import subprocess\nsubprocess.run(['git', 'push', '--force'])", "language": "python"}, "git push --force"),
    ],
)  # fmt: skip
def test_block_force_push_blocks(ax: AxEnv, tool: str, args: dict, spelling: str) -> None:
    ax.hooks({"packs": ["block-force-push"]})
    result = pre(ax, tool, args)
    assert (result.decision, result.cause, result.source) == (
        Verdict.DENY,
        Cause.BLOCK_ON_FAILURE,
        "block-force-push",
    )
    assert result.reason == (
        f"block-force-push: `{spelling}` rewrites the remote branch's history and is blocked. "
        "Push without force (rebase or merge first), or ask a human to do it."
    )


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("bash", {"command": "git push origin main"}),
        ("bash", {"command": 'echo "never git push --force"'}),
        ("code_execution", {"code": "git push -u origin main"}),
        ("read", {"filePath": "git-push-force.md"}),  # not a shell tool: not matched at all
    ],
)
def test_block_force_push_lets_ordinary_pushes_through(ax: AxEnv, tool: str, args: dict) -> None:
    ax.hooks({"packs": ["block-force-push"]})
    assert pre(ax, tool, args).decision is Verdict.ALLOW


@pytest.mark.parametrize(
    ("tool", "args", "hit"),
    [
        ("bash", {"command": "cat .env.local"}, ".env.local"),
        ("bash", {"command": "echo API_KEY=x >> .env"}, ".env"),
        ("code_execution", {"code": "source .env && ./run"}, ".env"),
        ("read", {"filePath": "/w/app/.env"}, "/w/app/.env"),
        ("read_file", {"path": ".env.production"}, ".env.production"),
        ("write", {"filePath": ".env", "content": "A=1"}, ".env"),
        ("write_file", {"path": "config/.env.test", "content": "A=1"}, "config/.env.test"),
        ("edit", {"filePath": ".env.staging", "oldString": "a", "newString": "b"}, ".env.staging"),
        ("delete_file", {"path": ".env"}, ".env"),
        ("grep", {"pattern": "KEY", "include": ".env*"}, ".env*"),
        ("Read", {"file_path": ".env"}, ".env"),
    ],
)
def test_protect_env_files_blocks_reads_and_writes(
    ax: AxEnv, tool: str, args: dict, hit: str
) -> None:
    ax.hooks({"packs": ["protect-env-files"]})
    result = pre(ax, tool, args)
    assert (result.decision, result.source) == (Verdict.DENY, "protect-env-files")
    assert result.reason == (
        f"protect-env-files: this {tool} call would read or write {hit!r}. .env files hold "
        "secrets and are off limits; ask the user for the values you need."
    )


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("bash", {"command": "echo .env"}),
        ("bash", {"command": "ls -la && cat README.md"}),
        ("read", {"filePath": "src/environment.ts"}),
        ("write_file", {"path": "docs/env.md", "content": "copy .env.example to .env"}),
        ("read", {"filePath": ".envrc"}),
    ],
)
def test_protect_env_files_allows_the_rest(ax: AxEnv, tool: str, args: dict) -> None:
    ax.hooks({"packs": ["protect-env-files"]})
    assert pre(ax, tool, args).decision is Verdict.ALLOW


def test_log_bash_commands_appends_one_json_line_per_command(ax: AxEnv) -> None:
    ax.hooks({"packs": ["log-bash-commands"]})
    session = ax.session(session_id="ses_log")
    session.fire("PreToolUse", {"tool": "bash", "args": {"command": "ls -la"}})
    session.fire(
        "PreToolUse", {"tool": "code_execution", "args": {"code": "print(1)", "language": "python"}}
    )
    session.fire("PreToolUse", {"tool": "read", "args": {"filePath": "x"}})  # not logged
    log = ax.state / "hookrunner" / "bash-commands.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:
        assert record.pop("time").endswith("Z")
    workspace = str(ax.workspace.resolve())
    assert records == [
        {"session_id": "ses_log", "tool": "bash", "cwd": workspace, "command": "ls -la"},
        {"session_id": "ses_log", "tool": "code_execution", "cwd": workspace,
         "command": "print(1)", "language": "python"},
    ]  # fmt: skip
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def _fake_formatter(ax: AxEnv, name: str, body: str) -> str:
    bin_dir = ax.root / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / name
    program.write_text("#!/bin/sh\n" + body)
    program.chmod(0o755)
    return f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def post_edit(ax: AxEnv, path: str, environ: dict[str, str]):
    # The tool user is the runner's own (these workspaces are 0700): formatters run as it.
    # Running them as another tool user is tests/hookrunner/ax/test_formatter_user.py.
    session = ax.session(environ={"HOOKRUNNER_TOOL_USER": "root", **environ})
    return session.fire(
        "PostToolUse", {"tool": "write", "args": {"filePath": path}, "output": "Wrote file."}
    )


def test_format_after_edit_runs_the_installed_formatter_and_reminds(ax: AxEnv) -> None:
    path = _fake_formatter(ax, "gofmt", 'for f; do :; done; printf "package main\\n" > "$f"\n')
    ax.hooks({"packs": ["format-after-edit"]})
    (ax.workspace / "main.go").write_text("package   main\n")
    result = post_edit(ax, "main.go", ax.environ(PATH=path))
    assert (ax.workspace / "main.go").read_text() == "package main\n"
    assert result.with_feedback("Wrote file.") == (
        "Wrote file.\n\n"
        '<hook_feedback event="PostToolUse">\n'
        "[format-after-edit] Reformatted main.go with `gofmt -w`. The file on disk changed: "
        "read it again before editing it.\n"
        "</hook_feedback>"
    )
    # Already formatted: the formatter runs, nothing changes, nothing is said.
    assert post_edit(ax, "main.go", ax.environ(PATH=path)).feedback is None


def test_format_after_edit_with_the_real_ruff(ax: AxEnv) -> None:
    ax.hooks({"packs": ["format-after-edit"]})
    (ax.workspace / "app.py").write_text("x  =  [1,2 ,3]\n")
    result = post_edit(ax, "app.py", ax.environ(PATH=f"{VENV_BIN}:/usr/bin:/bin"))
    assert (ax.workspace / "app.py").read_text() == "x = [1, 2, 3]\n"
    assert result.feedback is not None
    assert "Reformatted app.py with `ruff format --quiet`" in result.feedback


def test_format_after_edit_reports_a_formatter_failure_and_skips_the_rest(ax: AxEnv) -> None:
    path = _fake_formatter(ax, "gofmt", 'echo "main.go:1:1: expected package" >&2; exit 2\n')
    ax.hooks({"packs": ["format-after-edit"]})
    (ax.workspace / "main.go").write_text("oops\n")
    (ax.workspace / "notes.txt").write_text("no formatter for this\n")
    outside = ax.root / "outside.go"
    outside.write_text("package   x\n")
    failed = post_edit(ax, "main.go", ax.environ(PATH=path))
    assert failed.feedback is not None
    assert (
        "[format-after-edit] `gofmt -w` could not format main.go: main.go:1:1: expected package"
    ) in failed.feedback
    assert post_edit(ax, "notes.txt", ax.environ(PATH=path)).feedback is None
    assert post_edit(ax, str(outside), ax.environ(PATH=path)).feedback is None
    assert outside.read_text() == "package   x\n"


def test_require_tests_on_stop_follows_the_session(ax: AxEnv) -> None:
    ax.hooks({"packs": ["require-tests-on-stop"]})
    (ax.workspace / "pyproject.toml").write_text("[project]\n")
    session = ax.session(session_id="ses_tests")
    assert session.fire("Stop", {}).notices == ()
    session.fire("PostToolUse", {"tool": "edit", "args": {"filePath": "src/a.py"}, "output": ""})
    session.fire("PostToolUse", {"tool": "bash", "args": {"command": "rm old.py"}, "output": ""})
    assert session.fire("Stop", {}).notices == (
        "[require-tests-on-stop] Files changed after the last test run (src/a.py, old.py). "
        "Before ending, run `python -m pytest` (or the type checks and verification this "
        "project uses) and report the result.",
    )
    session.fire(
        "PostToolUse", {"tool": "bash", "args": {"command": "python -m pytest -q"}, "output": ""}
    )
    assert session.fire("Stop", {}).notices == ()
    other = ax.session(session_id="ses_other")  # state is per session
    other.fire("PostToolUse", {"tool": "write_file", "args": {"path": "b.py"}, "output": ""})
    assert len(other.fire("Stop", {}).notices) == 1
    assert session.fire("Stop", {}).notices == ()


def test_a_pack_that_cannot_read_its_input_blocks(ax: AxEnv) -> None:
    done = subprocess.run(
        ["/bin/sh", "-c", pack_command("block-force-push")],
        input=b"not json",
        capture_output=True,
        cwd=ax.workspace,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.decode().startswith("block-force-push: internal error (JSONDecodeError")


def test_packs_run_isolated_from_the_callers_python_environment(ax: AxEnv) -> None:
    evil = ax.root / "evil"
    evil.mkdir()
    (evil / "json.py").write_text("raise SystemExit('imported the wrong json')\n")
    ax.hooks({"packs": ["block-force-push"]})
    environ = ax.environ(PYTHONPATH=str(evil))
    (ax.workspace / "json.py").write_text("raise SystemExit('imported the workspace json')\n")
    result = pre(ax, "bash", {"command": "git push -f"}, environ=environ)
    assert result.reason is not None
    assert result.reason.startswith("block-force-push: `git push -f`")
