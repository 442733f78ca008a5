"""The warm runner and its tiny client (ax.quickfire, ax.quickclient, D230): the same answer
as `hookrunner fire`, byte for byte, and every way it cannot answer falls back to the full
runner, never to an allow. Real processes: a server, clients, the runner.

Whether a call was served warm is seen through RUNNER, a wrapper that logs every argv it is
run with and then runs the real hookrunner: a warm call never runs it with `fire`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax import quickclient
from sandbox_egress.hookrunner.ax.quickfire import peer_uid
from testbed.claude_code import server_pid
from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.test_claude_settings import BLOCK_RM, PAYLOADS
from tests.hookrunner.helpers import HOOKRUNNER

CLIENT = os.path.realpath(quickclient.__file__)
STOP_BLOCK = (
    "import json, sys\n"
    "json.load(sys.stdin)\n"
    "print(json.dumps({'decision': 'block', 'reason': 'go on'}))\n"
)


class Warm:
    def __init__(self, ax: AxEnv, tmp: Path) -> None:
        self.ax = ax
        # Short: a socket's path must fit in 108 bytes (pytest's own paths can be longer).
        self.run_dir = Path(tempfile.mkdtemp(prefix="hr-"))
        self.calls = tmp / "calls.log"
        self.runner = str(tmp / "runner")
        Path(self.runner).write_text(
            f'#!/bin/sh\necho "$*" >> {self.calls}\nexec {HOOKRUNNER} "$@"\n'
        )
        os.chmod(self.runner, 0o755)
        log = ax.root / "ran.log"
        operator = ax.root / "operator.json"
        blocker = ax.script("block_rm.py", BLOCK_RM) + f" {log}"
        stop = ax.script("stop_block.py", STOP_BLOCK)
        operator.write_text(
            json.dumps(
                {
                    "hooks": [
                        {"event": "PreToolUse", "command": blocker, "protocol": "claude-code"},
                        {"event": "Stop", "command": stop, "protocol": "claude-code"},
                    ]
                }
            )
        )
        self.flags = ["--claude-exit-codes", "--workspace", str(ax.workspace)]
        self.flags += ["--ax-config", str(operator)]
        self.servers: list[int] = []

    def environ(self) -> dict[str, str]:
        return self.ax.environ(XDG_RUNTIME_DIR=str(self.run_dir))

    def socket(self) -> Path:
        env = {**os.environ, **self.environ()}
        code = (
            "import sys; from sandbox_egress.hookrunner.ax import quickclient as q; "
            "print(q.socket_path(q.installation()))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return Path(done.stdout.strip())

    def serve(self) -> subprocess.Popen[bytes]:
        server = subprocess.Popen(
            [HOOKRUNNER, "claude", "serve", "--idle", "120"], env=self.environ()
        )
        self.wait_for_server()
        return server

    def wait_for_server(self) -> int:
        """The serving process's pid (from the socket's peer credentials), once it listens."""
        pid = server_pid(self.socket())
        if pid is None:
            raise AssertionError("no server listened within 30 s")
        self.servers.append(pid)
        return pid

    def fire(self, via: list[str], event: str, payload: Any) -> tuple[int, str, str]:
        done = subprocess.run(
            [*via, "fire", event, *self.flags],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=self.environ(),
            timeout=60,
        )
        return done.returncode, done.stdout, done.stderr

    def client(self, client: str = CLIENT) -> list[str]:
        return [sys.executable, "-I", "-S", client, self.runner]

    def fired_cold(self) -> int:
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        return sum(1 for line in lines if line.startswith("fire "))


@pytest.fixture
def warm(ax: AxEnv, tmp_path: Path) -> Iterator[Warm]:
    state = Warm(ax, tmp_path)
    yield state
    for pid in state.servers:  # only the servers these tests started, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 15)
    shutil.rmtree(state.run_dir, ignore_errors=True)


RM = PAYLOADS["PreToolUse"]
LS = {**RM, "tool_input": {"command": "ls"}}
CASES = [
    ("PreToolUse", RM),
    ("PreToolUse", LS),
    ("Stop", PAYLOADS["Stop"]),
    ("PreToolUse", {"tool_name": 3}),  # a payload error: a block
    ("PostToolUse", PAYLOADS["PostToolUse"]),
]


def test_a_warm_call_answers_as_the_runner_does(warm: Warm) -> None:
    warm.serve()
    for event, payload in CASES:  # where no boundary can be made, a session's first Bash
        warm.fire([HOOKRUNNER], event, payload)  # call says so once (D382): said here first
    for event, payload in CASES:
        cold = warm.fire([HOOKRUNNER], event, payload)
        hot = warm.fire(warm.client(), event, payload)
        assert hot == cold, (event, payload)
    assert warm.fired_cold() == 0  # every client call was served warm
    assert warm.fire(warm.client(), "PreToolUse", RM)[0] == 2


def test_without_a_server_the_client_is_the_runner_and_starts_one(warm: Warm) -> None:
    cold = warm.fire([HOOKRUNNER], "PreToolUse", RM)
    assert warm.fire(warm.client(), "PreToolUse", RM) == cold
    assert warm.fired_cold() == 1
    warm.wait_for_server()  # started in the background for the next call
    assert warm.fire(warm.client(), "PreToolUse", RM) == cold
    assert warm.fired_cold() == 1


def test_a_socket_directory_others_can_write_is_never_used(warm: Warm) -> None:
    warm.serve()
    os.chmod(warm.socket().parent, 0o777)
    try:
        assert warm.fire(warm.client(), "PreToolUse", LS)[0] == 0
        assert warm.fired_cold() == 1
    finally:
        os.chmod(warm.socket().parent, 0o700)


def test_a_client_of_another_build_is_refused_and_the_server_leaves(
    warm: Warm, tmp_path: Path
) -> None:
    server = warm.serve()
    other = tmp_path / "other" / "quickclient.py"
    other.parent.mkdir()
    shutil.copy(CLIENT, other)  # another file: another build id
    cold = warm.fire([HOOKRUNNER], "PreToolUse", RM)
    assert warm.fire(warm.client(str(other)), "PreToolUse", RM) == cold
    assert warm.fired_cold() == 1  # it ran the full runner, with its own descriptors
    assert server.wait(timeout=30) is not None
    assert warm.wait_for_server() != server.pid  # the client started a current one


def test_the_peer_is_this_user() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid(left) == os.getuid()


def test_a_runtime_directory_too_deep_for_a_socket_falls_back_to_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/" + "d" * 100)
    path = quickclient.socket_path("/usr/bin/python3")
    assert path.startswith(f"/tmp/hookrunner-{os.getuid()}/fire-") and len(path) < 100


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o1777])
def test_only_a_private_directory_is_trusted(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    os.chmod(directory, mode)
    assert quickclient.private(str(directory)) is (mode == 0o700)
    link = tmp_path / "link"
    link.symlink_to(directory)
    assert quickclient.private(str(link)) is False
