"""The approvers (proxy/approvals/approvers/): a command run as a real child process —
its answer read, a crash, a hang, garbage and a flood are no answer, and nothing of it is
left running — and a webhook POSTed to a real local server that checks the signature."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.common.process import group_members
from sandbox_egress.proxy.approvals.approvers import webhook
from sandbox_egress.proxy.approvals.approvers.base import Answer
from sandbox_egress.proxy.approvals.approvers.command import CommandApprover
from sandbox_egress.proxy.approvals.approvers.webhook import HEADER, WebhookApprover, signature

APPROVAL = {"id": "ap-0123456789abcdef", "sandbox": "sbx-1", "host": "new.example.com",
            "port": 443, "method": "GET", "path": "/x", "source": "request"}  # fmt: skip

PROGRAMS = {
    "allow": (
        "import json, sys; a = json.load(sys.stdin); "
        "print(json.dumps({'decision': 'allow', 'scope': 'session', 'reason': a['host']}))",
        Answer("allow", "session", "new.example.com"),
    ),
    "pending": ('print(\'{"decision": "pending"}\')', Answer("pending")),
    "crash": ('import sys; print(\'{"decision": "allow"}\'); sys.exit(1)', None),
    "killed": ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", None),
    "garbage": ("print('yes please')", None),
    "wrong shape": ("print('[\"allow\"]')", None),
    "unknown decision": ('print(\'{"decision": "sure"}\')', None),
    "flood": (
        "import sys; sys.stdout.write('{\"decision\": \"allow\"' + ' ' * 200000 + '}')",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_command_answers(case: str) -> None:
    program, expected = PROGRAMS[case]
    approver = CommandApprover((sys.executable, "-I", "-c", program), timeout_s=10)
    assert asyncio.run(approver.ask(APPROVAL)) == expected


def test_a_hanging_command_and_its_children_are_killed_at_the_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    program = (
        "import os, subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(60)"
    )
    approver = CommandApprover((sys.executable, "-I", "-c", program), timeout_s=1)
    started = time.monotonic()
    assert asyncio.run(approver.ask(APPROVAL)) is None
    assert time.monotonic() - started < 5
    leader = int(pids.read_text().split()[0])
    assert group_members(leader) == []


def test_a_missing_program_is_no_answer() -> None:
    approver = CommandApprover(("/nonexistent/approve",), timeout_s=1)
    assert asyncio.run(approver.ask(APPROVAL)) is None


def test_the_command_sees_no_secret_of_the_proxys_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("EGRESS_SECRET_FOR_TEST", "hunter2-secret")
    out = tmp_path / "env"
    program = f"import os; open({str(out)!r}, 'w').write(repr(dict(os.environ)))"
    asyncio.run(CommandApprover((sys.executable, "-I", "-c", program)).ask(APPROVAL))
    assert "hunter2-secret" not in out.read_text()


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]], list[int]]]:
    """A local server: records each POST (body, header), answers the next status queued."""
    seen: list[dict[str, Any]] = []
    statuses = [202]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"body": body, "signature": self.headers.get(HEADER)})
            self.send_response(statuses[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/egress", seen, statuses
    finally:
        server.shutdown()
        server.server_close()


def test_a_webhook_is_signed_over_the_exact_body(
    receiver: tuple[str, list[dict[str, Any]], list[int]],
) -> None:
    url, seen, statuses = receiver
    secret = b"webhook-secret"
    assert asyncio.run(WebhookApprover(url, secret).ask(APPROVAL)) == Answer("pending")
    [post] = seen
    expected = "sha256=" + hmac.new(secret, post["body"], hashlib.sha256).hexdigest()
    assert post["signature"] == expected == signature(secret, post["body"])
    assert json.loads(post["body"]) == APPROVAL
    statuses[0] = 500
    assert asyncio.run(WebhookApprover(url, secret).ask(APPROVAL)) is None
    assert asyncio.run(WebhookApprover("http://127.0.0.1:9/none", secret).ask(APPROVAL)) is None
    assert "webhook-secret" not in repr(WebhookApprover(url, secret))


def test_the_signature_of_a_known_vector() -> None:
    # RFC 4231 test case 2.
    assert signature(b"Jefe", b"what do ya want for nothing?") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


def test_a_dripping_receiver_is_no_answer_at_the_deadline_and_holds_no_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """D545: a receiver that sends its answer a byte every 0.3 s never trips a per-read
    timeout. The POST has one deadline for the whole exchange, and no thread of the
    proxy's shared pool is spent on it (credential fetches and tenant scans share it)."""
    monkeypatch.setattr(webhook, "TIMEOUT_S", 1.0)
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def drip() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\n":  # a byte every 0.3 s: no read ever idles
                if stop.wait(0.3):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/egress"

    async def asked() -> tuple[Answer | None, float, int]:
        threads = threading.active_count()
        started = time.monotonic()
        answer = await WebhookApprover(url, b"s").ask(APPROVAL)
        return answer, time.monotonic() - started, threading.active_count() - threads

    try:
        answer, took, new_threads = asyncio.run(asked())
    finally:
        stop.set()
        listener.close()
    assert answer is None
    assert 0.9 <= took < 3.0  # the deadline, not a read timeout the drip keeps resetting
    assert new_threads <= 0
