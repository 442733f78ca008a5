"""The git guard's broker: the only holder of the real git inside a tool's namespace (D375).

The tool user must not be able to run the real git by any path (mount points
named in ``/proc/self/mountinfo``, ``/proc/<pid>/exe``, ``/proc/<pid>/fd``).
A guard that runs as the tool user cannot have what the tool user lacks, so
the judgement runs here instead. ``toolns``'s namespace script starts this
program as root (or as the root of an unprivileged user namespace) before the
tool's program:

    python3 -I -S -B gitbroker.py SOCKET REAL_GIT CREDENTIALS

It opens ``REAL_GIT`` (an execute-only copy in a ``0000`` directory of the
guard's, which is read-only in the namespace) as an ``O_PATH`` descriptor, listens on ``SOCKET``
and returns once it listens (its daemon child serves). Each ``git`` the tool
runs is ``gitclient.py``, which sends its argv, environment, umask, stdio and
working directory (descriptors, ``SCM_RIGHTS``); a worker forked per
connection drops to the tool's credentials (``UID:GID``, or ``-``: every
capability of the user namespace), makes itself non-dumpable, takes the
client's descriptors and environment, runs the guard (``gitguard.guarded``)
and sends back the exit status.

``-B``: it writes no bytecode into the guard's directory (a file open for writing there
makes its read-only remount fail with EBUSY).

It exits once no other process shares its mount namespace (checked every
``IDLE`` seconds without a request): with ``exec`` the PID namespace or the
cgroup ends it with the tool, but ``fire``'s lasting namespace has neither.

Invariants: the real git's descriptor is close-on-exec (no git child inherits
it) and exists only in the broker and its non-dumpable workers; the real git
processes are non-dumpable too (an execute-only file), so no ``/proc`` link of
theirs opens it; a worker drops its privileges before it reads anything of the
client's, and waits for the request ``RECEIVE_TIMEOUT`` seconds at most (D515).
Standard library only, like the guard.
"""

from __future__ import annotations

import _socket  # not socket: its imports (selectors, enum, re) would delay every tool call
import os
import struct
import sys
from types import ModuleType

TYPE_CHECKING = False  # not typing's: its import costs as much
if TYPE_CHECKING:
    import ctypes

HEADER = struct.Struct("!I")
STATUS = struct.Struct("!i")
FD = struct.Struct("i")
MAX_REQUEST = 8 << 20
RECEIVE_TIMEOUT = 10.0  # seconds a worker waits for its request (gitclient sends it at once)
IDLE = 2.0  # seconds between two looks at whether anything is left to serve
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 4, 24, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
# The guard is imported by the serving child at the first request: the tool's start waits
# only for the parent to listen, and a tool call that runs no git never pays for it.


def guard_module() -> ModuleType:
    import importlib

    if __package__:
        return importlib.import_module("sandbox_egress.hookrunner.enforce.gitguard")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # copied beside gitguard.py
    return importlib.import_module("gitguard")


def _libc() -> ctypes.CDLL:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _failed(call: str) -> OSError:
    import ctypes

    return OSError(ctypes.get_errno(), call)


def undumpable() -> None:
    if _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise _failed("prctl(PR_SET_DUMPABLE)")


def drop_capabilities() -> None:
    """Every capability gone, the bounding set emptied (a later exec as uid 0 gains none)."""
    import ctypes

    libc = _libc()
    for capability in range(64):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice, all zero
    if libc.capset(header, data) != 0:
        raise _failed("capset")


def become(credentials: str) -> None:
    if credentials == "-":
        drop_capabilities()
    else:
        uid, gid = (int(part) for part in credentials.split(":"))
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    undumpable()


def receive(conn: _socket.socket) -> tuple[list[bytes], list[int]]:
    """One request: its NUL-separated fields (``gitclient.encode``) and four descriptors."""
    data, ancillary, _, _ = conn.recvmsg(1 << 16, _socket.CMSG_SPACE(4 * FD.size))
    fds: list[int] = []
    for level, kind, item in ancillary:
        if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS):
            whole = len(item) - len(item) % FD.size
            fds += [FD.unpack_from(item, at)[0] for at in range(0, whole, FD.size)]
    if len(data) < HEADER.size or len(fds) != 4:
        raise ValueError("a request without its header or descriptors")
    (length,) = HEADER.unpack_from(data)
    if length > MAX_REQUEST:
        raise ValueError("a request too large")
    body = bytearray(data[HEADER.size :])
    while len(body) < length:
        chunk = conn.recv(min(1 << 16, length - len(body)))
        if not chunk:
            raise ValueError("a request cut short")
        body += chunk
    return bytes(body).split(b"\0"), fds


def serve_one(conn: _socket.socket, real: int, credentials: str) -> int:
    become(credentials)  # before the request is read: a client that sends nothing holds
    conn.settimeout(RECEIVE_TIMEOUT)  # an unprivileged worker, and only for so long (D515)
    fields, fds = receive(conn)
    conn.settimeout(None)
    stdin, stdout, stderr, cwd = fds
    os.fchdir(cwd)
    for source, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(source, target)
    for fd in fds:
        os.close(fd)
    argv0, umask, count = os.fsdecode(fields[0]), int(fields[1]), int(fields[2])
    args = [os.fsdecode(arg) for arg in fields[3 : 3 + count]]
    os.umask(umask & 0o777)
    os.environ.clear()
    for entry in fields[3 + count :]:
        name, equals, value = entry.partition(b"=")
        if name and equals:
            os.environb[name] = value
    return int(guard_module().guarded(real, argv0, args))


def alone() -> bool:
    """Whether no other process shares this mount namespace (a ``lasting`` namespace of
    ``fire`` has no PID namespace to end the broker with its program)."""
    own, me = os.readlink("/proc/self/ns/mnt"), os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/mnt") == own:
                return False
        except OSError:
            continue
    return True


def serve(server: _socket.socket, real: int, credentials: str) -> None:
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    server.settimeout(IDLE)
    while True:
        try:
            fd, _ = server._accept()  # type: ignore[attr-defined]  # _socket has no accept()
        except TimeoutError:
            if alone():
                return  # nothing left in the namespace that could run git
            continue
        conn = _socket.socket(fileno=fd)
        conn.settimeout(None)
        guard_module()  # at the first git, once: most tool calls run none
        undumpable()  # (its capabilities already keep the capless tool from tracing it)
        if os.fork() == 0:
            status = 125
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                server.close()
                status = serve_one(conn, real, credentials)
            except Exception as exc:  # the client reports 125; the reason goes to its stderr
                with_reason = f"git guard (hookrunner): the broker failed: {type(exc).__name__}\n"
                os.write(2, with_reason.encode())
            finally:
                try:
                    conn.sendall(STATUS.pack(status))
                finally:
                    os._exit(0)
        conn.close()


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        sys.stderr.write("usage: gitbroker.py SOCKET REAL_GIT UID:GID|-\n")
        return 2
    path, real_path, credentials = argv[1:]
    real = os.open(real_path, os.O_PATH | os.O_CLOEXEC)
    server = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o666)
    server.listen(64)
    if os.fork() != 0:
        return 0  # listening: the namespace script goes on
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)  # hold none of the tool's pipes
    os.close(devnull)
    serve(server, real, credentials)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
