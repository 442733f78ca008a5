"""The warm runner (``hookrunner claude serve``): one process that has imported the runner
and forks a child per call of ``ax.quickclient`` (D230).

Each child is what ``hookrunner fire ...`` would have been, on the caller's own
descriptors (received over the socket), with the caller's argv, environment, directory
and umask: the same code path, the same output, the same exit status. Only the import
is shared; every call reads its configuration afresh.

Invariants:
* The socket lives in a directory private to this user (0700, owned, a real directory),
  is 0600, and a peer of another uid is refused (``SO_PEERCRED``): nobody else can make
  this runner run hooks, or hand it descriptors.
* A client of another build (``quickclient.build_id``) is answered ``-`` before it gives up
  its descriptors, and the server leaves, so the next call starts a current one.
* One server per installation (``quickclient.installation``): a second one finds the first
  listening and leaves; a socket nobody listens on is replaced. The server leaves after
  ``idle`` seconds without a call once its children have finished; each child is reaped.
* A child whose client went away (Claude Code's hook timeout kills the client) is
  terminated rather than left running hooks for nobody.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

from sandbox_egress.hookrunner.ax.quickclient import (
    ACCEPTED,
    STALE,
    build_id,
    installation,
    private,
    socket_path,
)
from sandbox_egress.hookrunner.errors import UsageError

MAX_REQUEST = 4 * 1024 * 1024  # argv and environment; a larger one is not a client's
DEFAULT_IDLE_S = 600.0


def listen(path: str) -> socket.socket | None:
    """The listening socket at ``path``, or None when a live server already has it."""
    directory = os.path.dirname(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    if not private(directory):
        raise UsageError(f"{directory}: not a directory private to this user; not serving")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            listener.close()
            return None  # another server answers there
        except OSError:
            os.unlink(path)  # left behind by a server that died
            listener.bind(path)
        finally:
            probe.close()
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener


def peer_uid(conn: socket.socket) -> int:
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", credentials)[1])


def serve(run: Callable[[list[str]], int], idle: float = DEFAULT_IDLE_S) -> int:
    """Serve calls until ``idle`` seconds pass without one; ``run`` is ``hookrunner main``."""
    path = socket_path(installation())
    listener = listen(path)
    if listener is None:
        return 0
    inode = os.stat(path).st_ino
    gc.freeze()  # what is built by now is shared with every child: no collection copies it
    children: set[int] = set()
    last = time.monotonic()
    try:
        while True:
            children -= {pid for pid in children if _reaped(pid)}
            ready, _, _ = select.select([listener], [], [], 1.0)
            if not ready:
                if not children and time.monotonic() - last > idle:
                    return 0
                continue
            conn, _ = listener.accept()
            last = time.monotonic()
            if peer_uid(conn) != os.getuid():
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                _child(conn, run)  # never returns
            children.add(pid)
            conn.close()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    fds: list[int] = []
    data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_LEN(3 * struct.calcsize("i")))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4]))
    if len(data) < 4:
        raise ValueError("no request")
    (size,) = struct.unpack(">I", data[:4])
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    body = data[4:]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ValueError("request cut short")
        body += more
    if len(fds) != 3:
        raise ValueError("not a request")
    return decode(body), fds


def decode(body: bytes) -> dict[str, object]:
    """The document ``quickclient.request`` framed; ValueError when it is not one."""
    words = [os.fsdecode(word) for word in body.split(b"\0")]
    if len(words) < 4 or not words[2].isdigit() or not words[3].isdigit():
        raise ValueError("not a request")
    count = int(words[3])
    if len(words) < 4 + count:
        raise ValueError("not a request")
    env: dict[str, str] = {}
    for entry in words[4 + count :]:
        name, equals, value = entry.partition("=")
        if not name or not equals:
            raise ValueError("not a request")
        env[name] = value
    return {
        "build": words[0],
        "cwd": words[1],
        "umask": int(words[2]),
        "argv": words[4 : 4 + count],
        "env": env,
    }


def _child(conn: socket.socket, run: Callable[[list[str]], int]) -> None:
    code = 1
    try:
        request, fds = _receive(conn)
        if request.get("build") != build_id(installation()):
            conn.sendall(STALE)
            os.kill(os.getppid(), signal.SIGTERM)  # leave: the next call starts a current one
            os._exit(0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env, argv = request["env"], request["argv"]
        if not isinstance(env, dict) or not isinstance(argv, list):
            raise ValueError("not a request")
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        os.chdir(str(request["cwd"]))
        os.umask(int(str(request["umask"])))
        conn.sendall(ACCEPTED)
        threading.Thread(target=_orphaned, args=(conn,), daemon=True).start()
        code = run([str(word) for word in argv])
        sys.stdout.flush()
        sys.stderr.flush()
        conn.sendall(bytes([code & 0xFF]))
    except Exception:  # nothing can be said on a socket that broke: the client fails safe
        code = 1
    os._exit(code & 0xFF)


def _orphaned(conn: socket.socket) -> None:
    """The client went away (killed at its hook timeout): so does this call."""
    with contextlib.suppress(OSError):
        if conn.recv(1) == b"":
            os.kill(os.getpid(), signal.SIGTERM)
