"""Running one child process with a deadline, bounded output and no leftovers.

Invariants (docs/hooks.md#execution-and-decisions;
docs/hooks.md#decisions-where-the-specification-is-silent):
* the child is the leader of a new session and process group, so the whole
  group can be signalled; it also runs in its own cgroup (or PID namespace)
  where the machine has one (``contain``), which is killed whole at the end,
  so a ``setsid`` grandchild does not survive the verdict either;
* the payload is written to stdin without blocking; a child that never reads
  stdin or closes it early is fine;
* stdout and stderr are read while the child runs and at most ``cap`` bytes of
  each are kept (the rest is drained and dropped, so the child never blocks on
  a full pipe and the runner's memory stays bounded);
* the verdict is taken when the group leader exits or the deadline passes;
  then the group gets SIGTERM, a short grace, and SIGKILL; the runner waits
  (boundedly, where /proc exists) until no process of the group is running;
  whatever is still in the pipes is read for a bounded grace only (a
  grandchild that keeps a pipe open, or that left the group, cannot hold the
  runner), and the leader is reaped. The leader is not reaped before the group is killed, so its
  process-group id cannot be reused by an unrelated process in between;
* a ``CancelToken`` set by another thread ends the wait at once, as if the
  deadline had passed (``cancelled`` in the result): the owner of a background
  hook can stop it without waiting for its timeout;
* this function never raises for anything the child does; it returns a result.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sandbox_egress.common.contain import Credentials, Jail, new_jail
from sandbox_egress.common.invariant import InvariantError

OUTPUT_CAP = 1024 * 1024
TERM_GRACE = 0.25  # SIGTERM -> SIGKILL
KILL_WAIT = 0.5  # SIGKILL is delivered asynchronously: wait for the group to be dead
DRAIN_GRACE = 0.1  # reading what is left in the pipes after SIGKILL
_PROC = "/proc"
_CHUNK = 64 * 1024
_POLL = 0.01  # only where pidfd_open is missing


@dataclass(frozen=True)
class ProcessResult:
    returncode: int | None  # negative: killed by that signal; None: not started / not reaped
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration: float
    spawn_error: str | None = None
    cancelled: bool = False  # the CancelToken was set before the child exited


class CancelToken:
    """A flag one thread sets to stop another's ``run_process`` waits; a pipe makes it selectable.

    ``close`` releases the pipe; the owner calls it once no ``run_process`` uses the token.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._lock = threading.Lock()
        self._set = False
        self._closed = False

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        with self._lock:
            if not self._set and not self._closed:
                self._set = True
                os.write(self._write, b"x")

    def is_set(self) -> bool:
        return self._set

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap


def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes,
    cwd: str,
    env: Mapping[str, str],
    timeout: float,
    cap: int = OUTPUT_CAP,
    cancel: CancelToken | None = None,
    user: Credentials | None = None,
    jail: str | None = None,
) -> ProcessResult:
    """Run ``argv`` to its verdict; ``user`` switches the child to that uid/gid (needs root).

    ``jail`` picks the containment (``contain.CGROUP``, ``PID_NAMESPACE``,
    ``PROCESS_GROUP``); the default is the best this machine gives.
    """
    started = time.monotonic()
    deadline = started + timeout
    if cancel is not None and cancel.is_set():
        return ProcessResult(None, b"", b"", False, False, False, 0.0, cancelled=True)
    box = new_jail(jail)
    try:
        proc = _spawn(box, argv, cwd, env, user)
        if box.gated:
            try:
                box.admit(proc.pid)  # before the gate opens: nothing runs outside the cgroup
            except OSError:
                _discard(proc)
                box.close()
                box = Jail()  # contain what we can rather than not run the hook at all
                proc = _spawn(box, argv, cwd, env, user)
            else:
                stdin = b"\n" + stdin
    except (OSError, ValueError) as exc:
        box.close()
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        return ProcessResult(None, b"", b"", False, False, False, 0.0, spawn_error=reason)
    out, err = _Capture(cap), _Capture(cap)
    try:
        child = _Child(proc, stdin, out, err, cancel, box)
    except BaseException:
        _discard(proc)
        box.close()
        raise
    with child:
        exited = child.pump(deadline, cancellable=True)
        timed_out = not exited and not child.cancelled
        child.stop_input()
        child.terminate_group()
        child.pump(time.monotonic() + TERM_GRACE, until_pipes_closed=True)
        child.kill_group()
        child.await_group_death(time.monotonic() + KILL_WAIT)
        child.pump(time.monotonic() + DRAIN_GRACE, until_pipes_closed=True)
        returncode = child.reap()
    return ProcessResult(
        returncode,
        bytes(out.data),
        bytes(err.data),
        out.truncated,
        err.truncated,
        timed_out,
        time.monotonic() - started,
        cancelled=not exited and child.cancelled,
    )


def _spawn(
    box: Jail,
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    user: Credentials | None,
) -> subprocess.Popen[bytes]:
    if box.gated and shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    switch = box.popen_user(user)
    return subprocess.Popen(
        box.argv(argv, user),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
        close_fds=True,
        user=None if switch is None else switch.uid,
        group=None if switch is None else switch.gid,
        extra_groups=None if switch is None else [],
    )


def _discard(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group id is still ours
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class _Child:
    """The selector loop around one Popen; closing it kills the group and reaps."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        payload: bytes,
        out: _Capture,
        err: _Capture,
        cancel: CancelToken | None = None,
        jail: Jail | None = None,
    ):
        if not (proc.stdin and proc.stdout and proc.stderr):
            raise InvariantError("a hook process is started with three pipes")
        self.proc = proc
        self.jail = jail if jail is not None else Jail()
        self.pgid = proc.pid
        self.payload = memoryview(payload)
        self.selector = selectors.DefaultSelector()
        self.pidfd: int | None = None
        self.exited = False
        self.sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in self.sinks:
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ)
        self.stdin_fd: int | None = proc.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)
        self.selector.register(self.stdin_fd, selectors.EVENT_WRITE)
        if not payload:
            self._close_stdin()
        with contextlib.suppress(OSError, AttributeError):
            self.pidfd = os.pidfd_open(proc.pid)
            self.selector.register(self.pidfd, selectors.EVENT_READ)
        self.cancel_fd: int | None = None
        self.cancelled = False
        if cancel is not None:
            self.cancel_fd = cancel.fileno()
            self.selector.register(self.cancel_fd, selectors.EVENT_READ)

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill_group()
        self.reap()
        self.jail.close()
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def pump(
        self, deadline: float, *, until_pipes_closed: bool = False, cancellable: bool = False
    ) -> bool:
        """Move data until the leader exits (or, after it, the pipes close) or the deadline.

        Returns whether the leader has exited. With ``cancellable``, a set cancel
        token ends the wait like the deadline.
        """
        while True:
            if self._leader_exited() and (not until_pipes_closed or not self.sinks):
                return True
            if cancellable and self.cancelled:
                return self.exited
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.exited
            wait = remaining if self.pidfd is not None else min(remaining, _POLL)
            for key, _ in self.selector.select(min(wait, 1.0)):
                self._ready(int(key.fd))

    def _ready(self, fd: int) -> None:
        if fd == self.pidfd:
            self.exited = True
            self.selector.unregister(fd)
        elif fd == self.cancel_fd:
            self.cancelled = True
            self.selector.unregister(fd)
            self.cancel_fd = None
        elif fd == self.stdin_fd:
            self._write()
        elif fd in self.sinks:
            self._read(fd)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.sinks[fd].feed(chunk)
        else:
            self.selector.unregister(fd)
            del self.sinks[fd]

    def _write(self) -> None:
        if self.stdin_fd is None:
            raise InvariantError("stdin is written only while it is open")
        try:
            written = os.write(self.stdin_fd, self.payload[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the child closed stdin or exited without reading it
            self._close_stdin()
            return
        self.payload = self.payload[written:]
        if not self.payload:
            self._close_stdin()

    def stop_input(self) -> None:
        self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin_fd is not None:
            self.selector.unregister(self.stdin_fd)
            self.stdin_fd = None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]

    def _leader_exited(self) -> bool:
        if not self.exited and self.pidfd is None:
            # Peek without reaping (WNOWAIT): the group id must stay reserved until killed.
            with contextlib.suppress(ChildProcessError):
                info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                self.exited = info is not None
        return self.exited

    def _signal_group(self, signum: int) -> None:
        if self.proc.returncode is not None:
            return  # reaped: the group id may belong to someone else now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def terminate_group(self) -> None:
        self._signal_group(signal.SIGTERM)

    def kill_group(self) -> None:
        self._signal_group(signal.SIGKILL)
        self.jail.kill()  # also what left the group (setsid): the whole cgroup

    def await_group_death(self, deadline: float) -> None:
        """Wait, boundedly, until no process of the group (and jail) is still running."""
        while (group_members(self.pgid) or not self.jail.empty()) and time.monotonic() < deadline:
            time.sleep(0.005)

    def reap(self) -> int | None:
        if self.proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1.0)
        return self.proc.returncode


def group_members(pgid: int) -> list[int]:
    """Running (not zombie) processes of a process group; empty where /proc is missing.

    `getpgid` (one system call) filters the machine's processes down to the group's;
    only those have their state read, so the cost does not grow with what else runs.
    """
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return []
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getpgid(pid) != pgid:
                continue
            with open(f"{_PROC}/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(b")")[2].split()
        if fields and fields[0] not in (b"Z", b"X"):
            members.append(pid)
    return members
