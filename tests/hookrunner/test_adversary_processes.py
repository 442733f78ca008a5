"""Issue 11, item 7: nothing a handler or a tool starts outlives its verdict, ``setsid`` included.

Real processes on this machine (a cgroup v1/v2 hybrid: the v2 hierarchy is
``/sys/fs/cgroup/unified``); the leftover's state is read from /proc.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from sandbox_egress.common import contain
from sandbox_egress.common.contain import CGROUP, PID_NAMESPACE, containment
from sandbox_egress.common.process import run_process
from tests.hookrunner.helpers import Env, base_environ

# Leaves a process in a new session, writes its pid, waits (bounded) for the file, exits.
# The pid comes from /proc/self/stat (the host's procfs), not $$, which a PID namespace renumbers.
ESCAPE = (
    "setsid sh -c 'read p _ < /proc/self/stat; echo $p > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
    "exec sleep 1000' "
    "</dev/null >/dev/null 2>&1 & "
    "n=0; while [ ! -s {pidfile} ] && [ $n -lt 500 ]; do sleep 0.01; n=$((n+1)); done; "
    "{tail}"
)


def running(pid: int) -> bool:
    """Whether our ``sleep 1000`` exists and is not a zombie (a zombie has already died).

    The pid file is written just before ``exec sleep 1000``: a process still between the two
    (its command line still ``sh -c ...``) is given up to 5 s to become the sleep, so a
    loaded machine does not read a survivor as gone."""
    deadline = time.monotonic() + 5
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if stat.rpartition(b")")[2].split()[0] in (b"Z", b"X"):
            return False
        if cmdline == b"sleep\x001000\x00":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def leftover(pidfile: Path) -> bool:
    pid = int(pidfile.read_text())
    alive = running(pid)
    if alive:  # clean up what the test made, by its pid
        os.kill(pid, 9)
    return alive


def cgroups_left() -> list[str]:
    base = contain._cgroup2_root()
    assert base is not None
    return sorted(p.name for p in base.glob(f"hookrunner-{os.getpid()}-*"))


@pytest.mark.privileged
def test_this_machine_has_cgroup_v2_with_kill() -> None:
    assert containment() == CGROUP


@pytest.mark.parametrize("jail", [CGROUP, PID_NAMESPACE])
@pytest.mark.privileged
def test_a_setsid_child_does_not_survive_run_process(tmp_path: Path, jail: str) -> None:
    pidfile = tmp_path / "pid"
    script = ESCAPE.format(pidfile=pidfile, tail="echo verdict")
    result = run_process(
        ["/bin/sh", "-c", script],
        stdin=b"",
        cwd=str(tmp_path),
        env=base_environ(),
        timeout=10,
        jail=jail,
    )
    assert (result.returncode, result.stdout) == (0, b"verdict\n")
    assert leftover(pidfile) is False
    assert cgroups_left() == []


def test_without_containment_the_setsid_child_survives(tmp_path: Path) -> None:
    """The old behaviour, kept as the fallback where neither mechanism exists."""
    pidfile = tmp_path / "pid"
    script = ESCAPE.format(pidfile=pidfile, tail="true")
    run_process(
        ["/bin/sh", "-c", script],
        stdin=b"",
        cwd=str(tmp_path),
        env=base_environ(),
        timeout=10,
        jail=contain.PROCESS_GROUP,
    )
    assert leftover(pidfile) is True


@pytest.mark.privileged
def test_a_pre_hook_leaves_nothing_running_after_its_deny(env: Env) -> None:
    pidfile = env.root / "pid"
    command = ESCAPE.format(pidfile=pidfile, tail='echo \'{"decision": "deny"}\'')
    env.hooks({"g": {"pre_tool_execution": [{"hooks": [{"type": "command", "command": command}]}]}})
    decision = env.session().pre("read_file", {"path": "x"})
    assert (decision.allowed, decision.group) == (False, "g")
    assert leftover(pidfile) is False
    assert cgroups_left() == []


@pytest.mark.privileged
def test_code_execution_leaves_nothing_running(env: Env) -> None:
    pidfile = env.root / "pid"
    code = ESCAPE.format(pidfile=pidfile, tail="echo done")
    result = env.session(tool_user="root").exec_tool("code_execution", {"code": code})
    assert (result.status, result.output) == ("ok", "done\n")
    assert leftover(pidfile) is False


def test_the_gate_passes_stdin_and_status_through(tmp_path: Path) -> None:
    result = run_process(
        [sys.executable, "-c", "import sys; d = sys.stdin.read(); print(len(d)); sys.exit(4)"],
        stdin=b"x" * 200_000,
        cwd=str(tmp_path),
        env=base_environ(),
        timeout=10,
        jail=CGROUP,
    )
    assert (result.returncode, result.stdout) == (4, b"200000\n")


def test_a_missing_program_is_a_spawn_error_in_a_cgroup(tmp_path: Path) -> None:
    result = run_process(
        ["no-such-program-hookrunner"],
        stdin=b"",
        cwd=str(tmp_path),
        env=base_environ(),
        timeout=10,
        jail=CGROUP,
    )
    assert (result.returncode, result.spawn_error) == (None, "No such file or directory")


@pytest.mark.privileged
def test_the_timeout_kills_the_whole_cgroup(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = ESCAPE.format(pidfile=pidfile, tail="sleep 30")
    started = time.monotonic()
    result = run_process(
        ["/bin/sh", "-c", script],
        stdin=b"",
        cwd=str(tmp_path),
        env=base_environ(),
        timeout=1,
        jail=CGROUP,
    )
    assert result.timed_out is True
    assert time.monotonic() - started < 10  # bounded, not a speed claim
    assert leftover(pidfile) is False
