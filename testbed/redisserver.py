"""A real Redis for the shared-state tests: Debian's `redis-server` (scripts/install-test-deps),
on a Unix socket in the test's own directory — no TCP port, nothing persisted — started
and stopped by pid (`testbed.procs`)."""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from testbed import procs


@dataclass
class RedisServer:
    child: procs.Child
    socket: Path

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def stop(self) -> None:
        self.child.stop()


def redis_server() -> str:
    found = shutil.which("redis-server")
    assert found is not None, (
        "needs redis-server (Debian's redis-server; scripts/install-test-deps)"
    )
    return found


def start_redis(directory: Path, name: str = "redis", *extra: str) -> RedisServer:
    """`extra`: more of redis-server's options (e.g. `--requirepass PASSWORD`)."""
    path = directory / f"{name}.sock"
    argv = [
        redis_server(), "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700",
        "--save", "", "--appendonly", "no", "--dir", str(directory), *extra,
    ]  # fmt: skip
    child = procs.start(name, argv, directory)

    def ready() -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(1)
                probe.connect(str(path))
                probe.sendall(b"PING\r\n")
                answer = probe.recv(64)  # a password-protected server answers NOAUTH: up
                return answer.startswith(b"+PONG") or answer.startswith(b"-NOAUTH")
        except OSError:
            return False

    procs.wait_until(f"{name} PING", ready, timeout=20, child=child)
    return RedisServer(child, path)
