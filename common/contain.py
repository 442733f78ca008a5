"""Containing every process a handler or tool starts, so that none outlives its verdict.

A process group is not enough: ``setsid`` leaves it. Three mechanisms, the
first that works on this machine is used (``containment()``, probed once):

* ``cgroup``: cgroup v2 (also the ``unified`` hierarchy of a v1/v2 hybrid)
  with ``cgroup.kill`` (Linux 5.14+) and a cgroup below the runner's own that
  it may create. Each run gets its own cgroup; the child is **gated**: it is a
  ``/bin/sh`` that first reads one newline from its stdin and only then execs
  the real program, and the runner writes that newline only after it has
  moved the child into the cgroup, so nothing the program does can happen
  outside it. At the end ``cgroup.kill`` kills every member, ``setsid`` or
  not, and the empty cgroup is removed.
* ``pidns``: without a usable cgroup but as root (``CAP_SYS_ADMIN``), the program runs as PID 1 of
  a new PID namespace (``unshare --pid --fork --kill-child``); when it exits,
  or when the runner kills the group, the kernel kills the whole namespace.
  Differences: the program is PID 1 (signals it sends itself without a
  handler are ignored; a death by signal is reported by ``unshare`` as exit 0)
  and a tool user is set with ``setpriv`` inside the namespace.
* ``process_group``: neither; only the process group is killed, and a
  ``setsid`` child survives (the known gap).

Invariants: every ``Jail`` is closed by its owner (``command.run_process``);
a failure of the cgroup machinery falls back to the process group for that
run, it never stops the hook from running.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CGROUP = "cgroup"
PID_NAMESPACE = "pidns"
PROCESS_GROUP = "process_group"
GATE = 'read -r _ || exit 125; exec "$@"'  # one newline from the runner, then the program
_CAP_SYS_ADMIN = 21  # unshare(CLONE_NEWPID) needs it
_counter = itertools.count()
_probed: tuple[str, Path | None] | None = None


@dataclass(frozen=True)
class Credentials:
    """Who a tool runs as when the runner (as root) gives it an unprivileged user."""

    uid: int
    gid: int
    name: str


def _cgroup2_root() -> Path | None:
    """The runner's own cgroup in the cgroup v2 hierarchy, or None."""
    mount = None
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                mount = fields[4]
                break
    own = None
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as groups:
        for line in groups:
            if line.startswith("0::"):
                own = line[3:].strip()
    if mount is None or own is None:
        return None
    return Path(mount) / own.lstrip("/")


def _probe() -> tuple[str, Path | None]:
    base = _cgroup2_root()
    if base is not None:
        probe = base / f"hookrunner-probe-{os.getpid()}"
        try:
            probe.mkdir()
            try:
                if (probe / "cgroup.kill").exists():
                    return CGROUP, base
            finally:
                probe.rmdir()
        except OSError:
            pass
    if _has_capability(_CAP_SYS_ADMIN) and shutil.which("unshare") and shutil.which("setpriv"):
        return PID_NAMESPACE, None
    return PROCESS_GROUP, None


def _has_capability(bit: int) -> bool:
    """Whether this process has the capability in its effective set (Linux /proc)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    return False


def _machine() -> tuple[str, Path | None]:
    global _probed
    if _probed is None:
        _probed = _probe()
    return _probed


def containment() -> str:
    """The mechanism this machine gives (``cgroup``, ``pidns`` or ``process_group``)."""
    return _machine()[0]


class Jail:
    """The process-group-only jail; subclasses add a cgroup or a PID namespace."""

    kind = PROCESS_GROUP
    gated = False  # whether the child waits for a newline on stdin before it execs

    def argv(self, argv: Sequence[str], user: Credentials | None) -> list[str]:
        return list(argv)

    def popen_user(self, user: Credentials | None) -> Credentials | None:
        """The credentials Popen itself switches to (None: the child stays the runner's user)."""
        return user

    def admit(self, pid: int) -> None:
        """Put the (gated, still waiting) child into the jail; OSError when that fails."""

    def kill(self) -> None:
        """SIGKILL every process in the jail."""

    def empty(self) -> bool:
        return True

    def close(self) -> None:
        pass


class CgroupJail(Jail):
    kind = CGROUP
    gated = True

    def __init__(self, base: Path) -> None:
        self.path = base / f"hookrunner-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()

    def argv(self, argv: Sequence[str], user: Credentials | None) -> list[str]:
        return ["/bin/sh", "-c", GATE, "hookrunner-gate", *argv]

    def admit(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1\n")

    def empty(self) -> bool:
        try:
            events = (self.path / "cgroup.events").read_text()
        except OSError:
            return True
        return "populated 0" in events

    def close(self) -> None:
        self.kill()
        deadline = time.monotonic() + 1.0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left behind; it holds no process that could still run
                time.sleep(0.005)


class PidNamespaceJail(Jail):
    kind = PID_NAMESPACE

    def argv(self, argv: Sequence[str], user: Credentials | None) -> list[str]:
        prefix = ["unshare", "--pid", "--fork", "--kill-child", "--"]
        if user is not None:
            ids = [f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
            prefix += ["setpriv", *ids]
        return [*prefix, *argv]

    def popen_user(self, user: Credentials | None) -> Credentials | None:
        return None  # unshare needs root; setpriv drops to the user inside the namespace


def new_jail(kind: str | None = None) -> Jail:
    """A jail of ``kind`` (default: what this machine gives); the process group on failure."""
    best, base = _machine()
    chosen = best if kind is None else kind
    if chosen == CGROUP:
        base = base if base is not None else _cgroup2_root()
        if base is not None:
            with contextlib.suppress(OSError):
                return CgroupJail(base)
        return Jail()
    if chosen == PID_NAMESPACE:
        return PidNamespaceJail()
    return Jail()
