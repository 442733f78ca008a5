"""The C quick client speaks the Python one's protocol, byte for byte (issue 44, D394).

A listener of the test's own at the socket both clients compute takes one request from
each (`quickfire.decode` reads it, the three descriptors arrive), answers `+` and a
status: both clients exit with it and send the same document. Without a warm runner the
C client becomes the Python client; when that cannot be executed (the installation is
gone) the C client exits 127 with a message.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax import quickbuild, quickclient
from sandbox_egress.hookrunner.ax.quickfire import decode

RUNNER = "/nonexistent/hookrunner"
ARGV = ["fire", "Stop", "--claude-json", "--claude-hooks", "/h/m.json", "--odd é\x01"]


@pytest.fixture
def client(tmp_path: Path) -> Path:
    cc = quickbuild.compiler()
    if cc is None:
        pytest.fail("no C compiler here: the C client cannot be tested")
    target = tmp_path / "hookrunner-client"
    assert quickbuild.build(cc, target) is None
    return target


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hr-"))  # short: a socket path's limit
    yield path
    shutil.rmtree(path, ignore_errors=True)


def listen_once(run_dir: Path, answer: bytes) -> tuple[threading.Thread, dict[str, Any]]:
    """One request taken at the socket both clients compute, answered with `answer`."""
    name = f"fire-{quickclient._digest(quickclient.installation())}.sock"
    path = run_dir / f"hookrunner-{os.getuid()}" / name
    path.parent.mkdir(mode=0o700, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    got: dict[str, Any] = {}

    def serve() -> None:
        conn, _ = server.accept()
        data, ancillary, _, _ = conn.recvmsg(65536, socket.CMSG_LEN(3 * 4))
        (size,) = struct.unpack(">I", data[:4])
        body = data[4:]
        while len(body) < size:
            body += conn.recv(size - len(body))
        got["request"] = decode(body)
        got["fds"] = sum(len(payload) // 4 for _, _, payload in ancillary)
        for _, _, payload in ancillary:
            for fd in struct.unpack(f"{len(payload) // 4}i", payload):
                os.close(fd)
        conn.sendall(answer)
        conn.close()
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, got


def env(run_dir: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(run_dir), "LC_ALL": "C.UTF-8",
            "HOOK_NOTE": "a=b=c"}  # fmt: skip


def test_both_clients_send_the_same_request(client: Path, run_dir: Path) -> None:
    python = os.path.abspath(sys.executable)
    script = os.path.realpath(quickclient.__file__)
    sent = []
    for argv in (
        [str(client), python, script, RUNNER, *ARGV],
        [python, "-I", "-S", script, RUNNER, *ARGV],
    ):
        thread, got = listen_once(run_dir, b"+\x07")
        done = subprocess.run(argv, env=env(run_dir), cwd=run_dir, capture_output=True, timeout=30)
        thread.join(timeout=30)
        assert done.returncode == 7, done.stderr
        assert got["fds"] == 3
        sent.append(got["request"])
        for stale in run_dir.glob("hookrunner-*/*.sock"):
            stale.unlink()
    assert sent[0] == sent[1]
    assert sent[0]["argv"] == ARGV and sent[0]["env"]["HOOK_NOTE"] == "a=b=c"


def test_the_c_client_exits_127_when_the_installation_is_gone(client: Path, run_dir: Path) -> None:
    """No warm runner: the C client runs the Python client, whose interpreter is gone; the
    installed command turns the 127 into a block (test_claude_faithful)."""
    script = os.path.realpath(quickclient.__file__)
    done = subprocess.run(
        [str(client), "/gone/bin/python3", script, RUNNER, *ARGV],
        env=env(run_dir),
        cwd=run_dir,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 127
    assert done.stderr == (
        "hookrunner: cannot run /gone/bin/python3 (No such file or directory): "
        "the runner's installation is gone\n"
    )
