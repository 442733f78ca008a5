"""The process runner's jails and their less common paths, in this process, without root (D530).

``contain``'s jails build the argv a child is started with and speak to a cgroup
through its files (``cgroup.procs``, ``cgroup.kill``, ``cgroup.events``); a real
cgroup needs root and is the privileged suites' business (test_command.py,
test_adversary_processes.py). Here the cgroup's directory is a temporary one: what
the runner writes there and how it reads ``cgroup.events`` is checked word for
word, and ``run_process`` runs real programs through the gate. Also: the runner on
a kernel without ``pidfd_open`` (it polls), a kernel that refuses the move into the
cgroup (the program runs once, contained by its process group), and ``/proc``
missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sandbox_egress.common import contain, process
from sandbox_egress.common.contain import GATE, CgroupJail, Credentials, Jail, PidNamespaceJail
from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.common.process import _Capture, _Child, group_members, run_process

NOBODY = Credentials(65534, 65534, "nobody")
ENV = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def cgroup_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The machine's containment as a cgroup whose directory is ``tmp_path/base``."""
    base = tmp_path / "base"
    base.mkdir()
    monkeypatch.setattr(contain, "_probed", (contain.CGROUP, base))
    return base


def test_a_pid_namespace_jail_starts_the_program_as_pid_one() -> None:
    jail = PidNamespaceJail()
    prefix = ["unshare", "--pid", "--fork", "--kill-child", "--"]
    assert jail.argv(["hook", "a b"], None) == [*prefix, "hook", "a b"]
    assert jail.argv(["hook"], NOBODY) == [
        *prefix,
        *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"),
        "hook",
    ]
    assert jail.popen_user(NOBODY) is None  # unshare needs root: setpriv drops inside
    assert (jail.kind, jail.gated, jail.empty()) == ("pidns", False, True)


def test_the_process_group_jail_changes_nothing() -> None:
    jail = contain.new_jail(contain.PROCESS_GROUP)
    assert type(jail) is Jail
    assert jail.argv(("hook", "x"), NOBODY) == ["hook", "x"]
    assert jail.popen_user(NOBODY) == NOBODY
    jail.admit(1)
    jail.kill()
    assert jail.empty() is True
    assert type(contain.new_jail(contain.PID_NAMESPACE)) is PidNamespaceJail


def test_the_containment_is_probed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contain, "_probed", None)
    found = contain.containment()
    assert contain._probed is not None and found == contain._probed[0]
    assert found in (contain.CGROUP, contain.PID_NAMESPACE, contain.PROCESS_GROUP)
    monkeypatch.setattr(contain, "_probed", (contain.PID_NAMESPACE, None))
    assert contain.containment() == "pidns"


def test_cap_sys_admin_is_what_a_pid_namespace_needs() -> None:
    """``_has_capability`` reads the effective set: with CAP_SYS_ADMIN ``unshare --pid``
    works, without it the kernel refuses."""
    made = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30)
    assert contain._has_capability(21) is (made.returncode == 0), made.stderr


def test_a_cgroup_jail_speaks_through_the_cgroups_files(cgroup_dir: Path) -> None:
    jail = contain.new_jail()
    assert isinstance(jail, CgroupJail) and (jail.kind, jail.gated) == ("cgroup", True)
    assert jail.path.parent == cgroup_dir and jail.path.is_dir()
    assert jail.path.name.startswith(f"hookrunner-{os.getpid()}-")
    assert jail.argv(["hook", "x"], NOBODY) == [
        "/bin/sh",
        "-c",
        GATE,
        "hookrunner-gate",
        "hook",
        "x",
    ]
    assert jail.popen_user(NOBODY) == NOBODY
    jail.admit(4242)
    assert (jail.path / "cgroup.procs").read_text() == "4242\n"
    assert jail.empty() is True  # no cgroup.events: nothing to wait for
    (jail.path / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert jail.empty() is False
    (jail.path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    assert jail.empty() is True
    jail.kill()
    assert (jail.path / "cgroup.kill").read_text() == "1\n"
    assert contain.new_jail().path != jail.path  # type: ignore[attr-defined]


def test_closing_a_cgroup_jail_removes_it_or_gives_up_within_a_second(cgroup_dir: Path) -> None:
    jail = CgroupJail(cgroup_dir)
    (jail.path / "left").write_text("")  # a directory rmdir cannot remove
    started = time.monotonic()
    jail.close()
    assert 1.0 <= time.monotonic() - started < 5.0
    assert sorted(p.name for p in jail.path.iterdir()) == ["cgroup.kill", "left"]
    shutil.rmtree(jail.path)
    started = time.monotonic()
    jail.close()  # already gone: nothing to kill, nothing to wait for
    assert time.monotonic() - started < 0.5
    assert not jail.path.exists()


def test_a_cgroup_of_its_own_needs_a_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contain, "_probed", (contain.PROCESS_GROUP, None))
    monkeypatch.setattr(contain, "_cgroup2_root", lambda: None)  # no cgroup2 mounted
    assert type(contain.new_jail(contain.CGROUP)) is Jail


def test_a_gated_child_runs_the_program_only_after_the_newline(cgroup_dir: Path) -> None:
    result = run_process(
        ["sh", "-c", 'cat; echo " done"'], stdin=b"payload", cwd="/", env=ENV, timeout=30
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, b"payload done\n", b"")
    [jail] = cgroup_dir.iterdir()
    assert int((jail / "cgroup.procs").read_text()) > 0  # the gate's pid, moved before it ran
    assert (jail / "cgroup.kill").read_text() == "1\n"  # the whole jail killed at the end


def test_a_gated_child_of_a_program_not_on_path_is_not_started(cgroup_dir: Path) -> None:
    result = run_process(["no-such-hook-program"], stdin=b"", cwd="/", env=ENV, timeout=30)
    assert (result.returncode, result.spawn_error) == (None, "No such file or directory")


def test_a_refused_move_into_the_cgroup_runs_the_program_once_uncontained(
    cgroup_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel refusing the move (a cgroup outside the runner's delegation): the gated
    child is killed before its gate opened, the program runs once in its process group."""

    def refuse(self: CgroupJail, pid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(CgroupJail, "admit", refuse)
    ran = tmp_path / "ran"
    result = run_process(
        ["sh", "-c", f"echo once >> {ran}; cat"], stdin=b"in", cwd="/", env=ENV, timeout=30
    )
    assert (result.returncode, result.stdout) == (0, b"in")
    assert ran.read_text() == "once\n"


def test_without_pidfd_open_the_runner_polls_the_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contain, "_probed", (contain.PROCESS_GROUP, None))
    monkeypatch.delattr(os, "pidfd_open")  # a kernel before Linux 5.3
    result = run_process(["sh", "-c", "echo hi; exit 4"], stdin=b"", cwd="/", env=ENV, timeout=30)
    assert (result.returncode, result.stdout, result.timed_out) == (4, b"hi\n", False)
    slow = run_process(["sleep", "5"], stdin=b"", cwd="/", env=ENV, timeout=0.2)
    assert (slow.returncode, slow.timed_out) == (-15, True)


def test_the_group_members_are_read_from_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    assert os.getpid() in group_members(os.getpgrp())
    monkeypatch.setattr(process, "_PROC", "/nonexistent-proc")
    assert group_members(os.getpgrp()) == []


def test_a_child_is_watched_only_with_its_three_pipes() -> None:
    proc = subprocess.Popen(["true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with pytest.raises(InvariantError, match="a hook process is started with three pipes"):
            _Child(proc, b"", _Capture(10), _Capture(10))
    finally:
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


def test_stdin_is_written_only_while_it_is_open() -> None:
    proc = subprocess.Popen(
        ["cat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    with _Child(proc, b"", _Capture(10), _Capture(10)) as child:  # empty: stdin closed at once
        assert child.stdin_fd is None
        with pytest.raises(InvariantError, match="stdin is written only while it is open"):
            child._write()
        assert child.pump(time.monotonic() + 30) is True  # cat saw the end of its input
    assert proc.returncode == 0
