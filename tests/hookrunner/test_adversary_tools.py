"""Issue 11, items 2, 4, 5 and 6: what an agent can do to the runner through the tools.

Everything is real: the CLI in child processes, FIFOs, a concurrent process
that flips a symlink between inside and outside the workspace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import beneath
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ

HANG_LIMIT = 20.0  # seconds a CLI call may take before the test calls it hung


def cli(env: Env, *args: str, stdin: dict[str, object], **extra: str) -> dict[str, object]:
    done = subprocess.run(
        [HOOKRUNNER, *args, "--workspace", str(env.workspace)],
        input=json.dumps(stdin).encode(),
        capture_output=True,
        env=base_environ(**extra),
        timeout=HANG_LIMIT,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def exec_tool(env: Env, tool: str, **args: object) -> dict[str, object]:
    return cli(env, "exec", tool, "--system-config", str(env.system_config), stdin=args)


# Item 2: the agent writes its own repository hooks.


def test_write_file_cannot_install_a_repository_hook(env: Env) -> None:
    marker = env.root / "attacker-ran"
    hook = {
        "g": {
            "pre_tool_execution": [{"hooks": [{"type": "command", "command": f"touch {marker}"}]}]
        }
    }
    answer = exec_tool(env, "write_file", path=".agents/hooks.json", content=json.dumps(hook))
    assert answer == {
        "status": "error",
        "output": "",
        "error": "write_file: .agents/hooks.json: .agents/ holds the repository's hooks "
        "and is read-only for tools",
    }
    assert not (env.workspace / ".agents" / "hooks.json").exists()
    assert exec_tool(env, "list_files", path=".")["status"] == "ok"
    assert not marker.exists()


@pytest.mark.parametrize(
    ("tool", "path", "first"),
    [
        ("write_file", ".AGENTS/hooks.json", ".AGENTS"),
        ("write_file", ".agents/new/x.json", ".agents"),
        ("write_file", "alias/hooks.json", ".agents"),
        ("write_file", ".ax-code/hooks.json", ".ax-code"),
        ("write_file", "./sub/../.Ax-Code/hooks.json", ".Ax-Code"),
        ("delete_file", ".agents/hooks.json", ".agents"),
        ("delete_file", "alias/hooks.json", ".agents"),
        ("delete_file", ".ax-code/hooks.json", ".ax-code"),
        ("write_file", ".claude/settings.local.json", ".claude"),  # issue 31
        ("write_file", ".Claude/settings.json", ".Claude"),
        ("delete_file", ".claude/settings.json", ".claude"),
    ],
)
def test_hook_directories_are_read_only_for_tools(
    env: Env, tool: str, path: str, first: str
) -> None:
    original = '{"kept": {}}'
    env.hooks(original)
    (env.workspace / ".ax-code").mkdir()
    (env.workspace / ".ax-code" / "hooks.json").write_text(original)
    (env.workspace / "sub").mkdir()
    (env.workspace / "alias").symlink_to(".agents")
    (env.workspace / ".claude").mkdir()
    (env.workspace / ".claude" / "settings.json").write_text(original)
    answer = exec_tool(env, tool, path=path, content="{}")
    assert answer == {
        "status": "error",
        "output": "",
        "error": f"{tool}: {path}: {first}/ holds the repository's hooks and is read-only for tools",
    }
    assert (env.workspace / ".agents" / "hooks.json").read_text() == original
    assert (env.workspace / ".ax-code" / "hooks.json").read_text() == original
    assert sorted(p.name for p in (env.workspace / ".agents").iterdir()) == ["hooks.json"]
    assert [p.name for p in (env.workspace / ".claude").iterdir()] == ["settings.json"]
    assert (env.workspace / ".claude" / "settings.json").read_text() == original


def test_read_file_may_still_read_the_hooks(env: Env) -> None:
    env.hooks('{"kept": {}}')
    assert exec_tool(env, "read_file", path=".agents/hooks.json") == {
        "status": "ok",
        "output": '{"kept": {}}',
    }


# Item 4: the full-environment switch is for command hooks, never for the tools.


@pytest.mark.parametrize("how", ["flag", "variable", "api"])
@pytest.mark.privileged
def test_full_env_does_not_reach_code_execution(env: Env, how: str) -> None:
    seen = env.root / "hook-saw"
    env.hooks(
        {
            "g": {
                "pre_tool_execution": [
                    {"hooks": [{"type": "command", "command": f'echo "$API_TOKEN" > {seen}'}]}
                ]
            }
        },
        system=True,
    )
    code = {"code": 'echo "[${API_TOKEN:-unset}]"', "language": "bash"}
    if how == "api":
        session = env.session(environ=base_environ(API_TOKEN="t0ps3cret-value"), full_env=True)
        output = session.exec_tool("code_execution", code).output
    else:
        extra = {"HOOKRUNNER_FULL_ENV": "1"} if how == "variable" else {}
        flags = ["--full-env"] if how == "flag" else []
        answer = cli(
            env,
            "exec",
            "code_execution",
            "--system-config",
            str(env.system_config),
            *flags,
            stdin=code,
            API_TOKEN="t0ps3cret-value",
            **extra,
        )
        output = str(answer["output"])
    assert output == "[unset]\n"
    assert seen.read_text() == "t0ps3cret-value\n"  # the operator's hooks still get it


# Item 6: a FIFO where a file is expected.


def test_a_fifo_as_hooks_json_does_not_hang_the_session(env: Env) -> None:
    os.mkfifo(env.workspace / ".agents" / "hooks.json")
    payload = {"tool_call": {"name": "read_file", "args": {}}}
    done = subprocess.run(
        [
            HOOKRUNNER,
            "run",
            "pre_tool_execution",
            "--workspace",
            str(env.workspace),
            "--system-config",
            str(env.system_config),
        ],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=base_environ(),
        timeout=HANG_LIMIT,
    )
    assert (done.returncode, json.loads(done.stdout)) == (0, {"decision": "allow"})
    fifo = env.workspace / ".agents" / "hooks.json"
    assert f'file={fifo} path=$ cause="not a regular file"' in done.stderr.decode()


def test_a_fifo_as_the_ax_project_file_does_not_hang(env: Env) -> None:
    (env.workspace / ".ax-code").mkdir()
    os.mkfifo(env.workspace / ".ax-code" / "hooks.json")
    done = subprocess.run(
        [
            HOOKRUNNER,
            "fire",
            "PreToolUse",
            "--workspace",
            str(env.workspace),
            "--trust-project-hooks",
        ],
        input=b'{"tool": "bash", "args": {"command": "ls"}}',
        capture_output=True,
        env=base_environ(),
        timeout=HANG_LIMIT,
    )
    assert json.loads(done.stdout)["decision"] == "allow"
    assert "not a regular file" in done.stderr.decode()


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
def test_file_tools_refuse_a_fifo_without_hanging(env: Env, tool: str) -> None:
    os.mkfifo(env.workspace / "pipe")
    answer = exec_tool(env, tool, path="pipe", content="x")
    assert answer == {"status": "error", "output": "", "error": f"{tool}: pipe: not a regular file"}


def test_write_file_refuses_a_hard_link(env: Env) -> None:
    (env.workspace / "a.txt").write_text("original")
    os.link(env.workspace / "a.txt", env.workspace / "b.txt")
    answer = exec_tool(env, "write_file", path="b.txt", content="x")
    assert answer["error"] == "write_file: b.txt: file has other hard links; not written"
    assert (env.workspace / "a.txt").read_text() == "original"


# Item 5: a concurrent process flips a symlink between inside and outside.

FLIPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    ws = sys.argv[1]
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.path.join(ws, "d").encode(), os.path.join(ws, "e").encode()
    end = time.monotonic() + 120  # bounded even if nobody stops it
    print("flipping", flush=True)
    while time.monotonic() < end:
        # RENAME_EXCHANGE: "d" is the real directory, then the symlink to outside, atomically
        libc.renameat2(-100, a, -100, b, 2)
    """
)

RACE_ROUNDS = 3000


@pytest.fixture
def race(env: Env) -> tuple[Path, Path]:
    inside = env.workspace / "inside"  # becomes "d", exchanged with the symlink "e"
    outside = env.root / "outside"
    for directory, text in ((inside, "inside"), (outside, "OUTSIDE")):
        directory.mkdir()
        (directory / "data.txt").write_text(text)
    (env.workspace / "e").symlink_to(outside)
    inside.rename(env.workspace / "d")
    return env.workspace / "d", outside


def _flipping(env: Env, inside: Path, outside: Path) -> subprocess.Popen[str]:
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(env.workspace)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert flipper.stdout is not None
    assert flipper.stdout.readline() == "flipping\n"
    return flipper


@pytest.mark.slow
@pytest.mark.parametrize("walk", ["openat2", "component-wise"])
def test_symlink_race_never_reaches_outside(
    env: Env, race: tuple[Path, Path], walk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert beneath.has_openat2()  # this kernel has it; the other walk is forced below
    if walk == "component-wise":
        monkeypatch.setattr(beneath, "_openat2_works", False)
    inside, outside = race
    session = env.session()
    flipper = _flipping(env, inside, outside)
    outside_reads = outside_writes = outside_deletes = 0
    inside_reads = 0
    try:
        for n in range(RACE_ROUNDS):
            read = session.exec_tool("read_file", {"path": "d/data.txt"})
            outside_reads += read.output == "OUTSIDE"
            inside_reads += read.output == "inside"
            session.exec_tool("write_file", {"path": f"d/w{n % 7}.txt", "content": "x"})
            victim = outside / f"victim{n % 7}.txt"
            victim.write_text("keep")
            session.exec_tool("delete_file", {"path": f"d/victim{n % 7}.txt"})
            outside_deletes += not victim.exists()
    finally:
        flipper.kill()
        flipper.wait()
    outside_writes = len(list(outside.glob("w*.txt")))
    assert (outside_reads, outside_writes, outside_deletes) == (0, 0, 0)
    assert inside_reads > 0  # the race really ran both ways
