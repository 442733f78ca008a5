"""The tiny client of a warm runner: ``python -I -S quickclient.py RUNNER fire EVENT ...``.

Claude Code starts a hook command for every tool call, twice (Pre and Post). A Python
process that imports the runner takes a quarter to half a second; this one imports
nothing but ``_socket`` (``json`` and ``socket`` alone cost ~10 ms of a ~40 ms call,
D249), passes its own stdin, stdout and stderr (the descriptors, over a Unix socket) with
its argv, environment, directory and umask to a warm runner (``hookrunner claude serve``,
``ax.quickfire``), which forks a child that runs exactly ``hookrunner fire ...`` on them,
and exits with that child's status (D230). The server's
first byte says whether it took the call (``+``) or is of another build (``-``): only
then does this client give up its descriptors.

Fails safe, never open: no server, a socket directory not private to this user, a
server of another build or a broken connection before any answer, and the client
becomes the full runner itself (``exec RUNNER fire ...``), starting a server in the
background for the next call. Nothing here may import the runner's package.
"""

import _socket  # not socket: its enum, selectors and io imports cost more than this client
import os
import sys

ACCEPTED, STALE = b"+", b"-"  # the server's first byte: it runs the call, or it is of another build
BLOCKING = ("PreToolUse", "UserPromptSubmit")  # an error there is a block (exit 2), as in fire


def installation() -> str:
    """The directory the interpreter is installed in (a venv: whichever of its ``python``
    names ran, with or without ``-S``, which changes ``sys.prefix``)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


def socket_path(prefix: str) -> str:
    """One socket per installation (``installation()``), in a directory private to this
    user."""
    name = os.path.join(f"hookrunner-{os.getuid()}", f"fire-{_digest(prefix)}.sock")
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    if len(os.path.join(base, name).encode()) > 100:  # a socket's path fits in 108 bytes
        base = "/tmp"
    return os.path.join(base, name)


def _digest(text: str) -> str:
    """A short stable name (``hash()`` is salted per process)."""
    value = 2166136261
    for byte in text.encode():
        value = ((value ^ byte) * 16777619) & 0xFFFFFFFF
    return format(value, "08x")


def private(directory: str) -> bool:
    """The directory is this user's alone: nobody else can put a socket in it."""
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return info.st_uid == os.getuid() and (info.st_mode & 0o077) == 0 and (info.st_mode >> 12) == 4


def build_id(prefix: str) -> str:
    """What client and server must agree on: the installation and this file's version."""
    info = os.stat(__file__)
    return f"{prefix}:{info.st_ino}:{info.st_mtime_ns}"


def request(argv: list[str]) -> bytes:
    """A 4-byte big-endian length, then NUL-separated words (none can hold a NUL): the
    build, the directory, the umask, the number of arguments, the arguments, then the
    environment's ``NAME=value`` entries (``quickfire.decode`` reads it). Words are the
    bytes the system gave (``os.fsencode``), so whatever they are, the runner sees them."""
    words = [build_id(installation()), os.getcwd(), str(_umask()), str(len(argv)), *argv]
    words += [f"{name}={value}" for name, value in os.environ.items()]
    body = b"\0".join(os.fsencode(word) for word in words)
    return len(body).to_bytes(4, "big") + body


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ask(path: str, argv: list[str]) -> tuple[str, int]:
    """(how it went, the exit status): ``done``; ``unreached`` (the server did not take the
    call: this client's descriptors are still its own, run the full runner); ``broken``
    (the server took the call, then gave no answer: too late to run it again)."""
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.connect(path)
        message = request(argv)
        conn.sendmsg([message[:4096]], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _fds())])
        if len(message) > 4096:  # nothing more to send is no send: a server that answered
            conn.sendall(message[4096:])  # and left already would make it EPIPE (D394)
        if conn.recv(1) != ACCEPTED:  # another build (it is leaving), or gone
            return "unreached", 0
    except OSError:
        return "unreached", 0
    try:
        # From here the child owns stdin and stdout: an observation event's caller gets
        # its EOF when the child closes them, not when this client exits.
        _let_go()
        status = conn.recv(1)
    except OSError:
        status = b""
    finally:
        conn.close()
    return ("done", status[0]) if status else ("broken", 0)


def _fds() -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))  # a C int[3]


def _let_go() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def start_server(runner: str) -> None:
    """A server for the next call, detached: its own session, no descriptor of ours."""
    import subprocess  # only here: the usual call never pays for it

    try:  # noqa: SIM105 (contextlib is one more import on every call)
        subprocess.Popen(
            [runner, "claude", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: quickclient.py RUNNER fire EVENT [options]\n")
        return 2
    runner, rest = argv[0], argv[1:]
    path = socket_path(installation())
    how = "unreached"
    if private(os.path.dirname(path)) and os.path.exists(path):
        how, status = ask(path, rest)
        if how == "done":
            return status
        if how == "broken":  # the payload may be half read: never guess an allow
            sys.stderr.write("hookrunner: the warm runner broke off before answering\n")
            return 2 if len(rest) > 1 and rest[1] in BLOCKING else 1
    start_server(runner)  # none, not ours, or of another build: one for the next call
    os.execv(runner, [runner, *rest])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
