"""What ``git`` is inside a tool's namespace: a client of the guard's broker (D375).

The wrapper mounted over every path of the git binary runs
``python3 -I -S gitclient.py SOCKET "$0" "$@"``. It sends the broker its argv,
environment and umask, with its stdin, stdout, stderr and working directory as
descriptors, and exits with the status the broker's worker sends back (the
guard's refusal, or the real git's own). It holds nothing of the real git
and can run nothing itself: the tool user's processes never can (gitbroker).

Invariants: a broker that cannot be reached or answers nothing gives exit
status 125 and one line on stderr; never a git run some other way.
"""

from __future__ import annotations

import _socket  # not socket: its imports (selectors, enum, re) cost every git command
import os
import struct
import sys

HEADER = struct.Struct("!I")
STATUS = struct.Struct("!i")
FDS = struct.Struct("4i")
FAILED = 125


def valid(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def encode(argv0: str, args: list[str]) -> bytes:
    """argv0, umask, the number of arguments, the arguments, then NAME=VALUE of the
    environment: NUL-separated (none of them can hold a NUL)."""
    umask = os.umask(0o022)
    os.umask(umask)
    head = [os.fsencode(argv0), str(umask).encode(), str(len(args)).encode()]
    env = [name + b"=" + value for name, value in os.environb.items()]
    return b"\0".join([*head, *(os.fsencode(arg) for arg in args), *env])


def request(path: str, argv0: str, args: list[str]) -> int:
    body = encode(argv0, args)
    stdio = [fd if valid(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
    cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        conn.connect(path)
        message = HEADER.pack(len(body)) + body
        rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, FDS.pack(*stdio, cwd))]
        sent = conn.sendmsg([message[: 1 << 15]], rights)
        os.close(cwd)
        conn.sendall(message[sent:])
        answer = b""
        while len(answer) < STATUS.size:
            chunk = conn.recv(STATUS.size - len(answer))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            answer += chunk
    finally:
        conn.close()
    (status,) = STATUS.unpack(answer)
    return 128 - status if status < 0 else int(status)  # killed by a signal: as a shell says


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: gitclient.py SOCKET ARGV0 [ARGS...]\n")
        return 2
    try:
        return request(argv[1], argv[2], argv[3:])
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"git guard (hookrunner): the guard's broker is unreachable ({exc})\n")
        return FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
