"""The approvals admin API end to end in one process (runtime/admin.py, common/serve.py,
runtime/approvalscli.py, proxy/approvals/admin.py, proxy/approvals/access.py): a real
metrics server on loopback, the service on an event loop of its own thread, the CLI's
client — the bearer token, listing, deciding, a grant made ahead, asking ahead from a
sandbox, and every error answer."""

from __future__ import annotations

import argparse
import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from sandbox_egress.addons.approvals import ApprovalGate
from sandbox_egress.common.serve import MetricsServer
from sandbox_egress.proxy.approvals import access
from sandbox_egress.proxy.approvals.scopes import ONCE, Scope
from sandbox_egress.proxy.approvals.service import Approvals
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS, ApprovalsConfig
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.runtime import approvalscli
from sandbox_egress.runtime.admin import AdminApi, effective, read_token
from sandbox_egress.runtime.startup import LaunchError

TOKEN = "unit-admin-token-0123456789"
CONFIG = ApprovalsConfig(True, 30.0, 2, (ONCE, Scope("session")), ())
POLICY = Policy(parse({"network": {"allowlist": ["api.example.com"]}}, "f.yaml", {}))


class Running:
    def __init__(self, config: ApprovalsConfig = CONFIG) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.service = Approvals(MemoryState(), ProxyMetrics().approvals, lambda: self.config)
        shared = SimpleNamespace(tenancy=None, policy=POLICY)
        self.gate = ApprovalGate(cast(Any, shared), self.service)
        self.server = MetricsServer(("127.0.0.1", 0), CollectorRegistry())
        self.server.admin = AdminApi(self.gate, TOKEN, self.loop)
        self.server.start()

    def call(self, method: str, path: str, body: Any = None, token: str = TOKEN) -> Any:
        host, port = self.server.address
        return approvalscli.call(host, port, token, method, path, body)

    def run(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    def close(self) -> None:
        self.server.stop()
        self.run(self.service.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def running() -> Iterator[Running]:
    found = Running()
    try:
        yield found
    finally:
        found.close()


def ask_ahead(running: Running, body: bytes, sandbox: str | None = "sbx-1") -> Any:
    work = access.answer(running.service, running.gate.holdable, sandbox, "POST",
                         access.COLLECTION, body)  # fmt: skip
    return running.run(work)


def test_the_token_is_required(running: Running) -> None:
    assert running.call("GET", "/approvals", token="wrong") == (401, {"error": "unauthorized"})
    assert running.call("GET", "/approvals")[0] == 200
    assert running.call("GET", "/approvalsx")[0] == 404  # not the API's path
    assert running.call("GET", "/approvals/x") == (404, {"error": "not_found"})


def test_list_decide_and_errors(running: Running) -> None:
    status, made = ask_ahead(running, b'{"host": "new.example.com", "port": 443, "reason": "r"}')
    assert status == 202 and made["state"] == "pending"
    status, listed = running.call("GET", "/approvals")
    [approval] = listed["approvals"]
    assert (approval["id"], approval["sandbox"], approval["source"]) == (
        made["id"], "sbx-1", "access_request",
    )  # fmt: skip
    one = f"/approvals/{made['id']}"
    assert running.call("POST", one, {"decision": "allow", "scope": "2h"}) == (
        400, {"error": "bad_decision_or_scope"},
    )  # fmt: skip
    assert running.call("POST", one, {"decision": 1}) == (400, {"error": "bad_request"})
    assert running.call("GET", one) == (405, {"error": "method_not_allowed"})
    assert running.call("POST", "/approvals/ap-0000000000000000", {"decision": "deny"}) == (
        404, {"error": "not_found"},
    )  # fmt: skip
    status, decided = running.call("POST", one, {"decision": "allow", "scope": "session"})
    assert (status, decided["state"], decided["decided_by"]) == (200, "allowed", "api")
    assert running.call("POST", one, {"decision": "deny"}) == (409, {"error": "already_decided"})
    grants = running.call("GET", "/approvals")[1]["grants"]
    assert [(g["host"], g["scope"]) for g in grants] == [("new.example.com", "session")]
    seen = running.run(
        access.answer(
            running.service,
            running.gate.holdable,
            "sbx-1",
            "GET",
            f"{access.COLLECTION}/{made['id']}",
            b"",
        )  # fmt: skip
    )
    assert seen == (200, {"id": made["id"], "host": "new.example.com", "port": 443,
                          "state": "allowed", "scope": "session"})  # fmt: skip
    other = running.run(
        access.answer(
            running.service,
            running.gate.holdable,
            "sbx-2",
            "GET",
            f"{access.COLLECTION}/{made['id']}",
            b"",
        )  # fmt: skip
    )
    assert other == (404, {"error": "not_found"})


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"not json", (400, {"error": "bad_request"})),
        (b"[]", (400, {"error": "bad_request"})),
        (b'{"host": 1}', (400, {"error": "bad_request"})),
        (b'{"host": "a.example", "port": 0}', (400, {"error": "bad_request"})),
        (b'{"host": "a b"}', (400, {"error": "bad_request"})),
        (b'{"host": "api.example.com"}', (400, {"error": "not_holdable"})),
        (b'{"host": "127.0.0.1"}', (400, {"error": "not_holdable"})),
        (b'{"host": "egress.invalid"}', (400, {"error": "not_holdable"})),
    ],
)
def test_access_requests_refused(running: Running, body: bytes, expected: Any) -> None:
    assert ask_ahead(running, body) == expected
    assert running.service.book.all() == []


def test_the_bound_and_the_paths(running: Running) -> None:
    for n in range(2):
        assert ask_ahead(running, f'{{"host": "h{n}.example.org"}}'.encode())[0] == 202
    assert ask_ahead(running, b'{"host": "h3.example.org"}') == (429, {"error": "approval_limit"})
    work = access.answer(running.service, running.gate.holdable, None, "GET", "/other", b"")
    assert running.run(work) == (404, {"error": "not_found"})
    work = access.answer(
        running.service, running.gate.holdable, None, "GET", access.COLLECTION, b""
    )
    assert running.run(work) == (405, {"error": "method_not_allowed"})


def test_a_grant_made_ahead(running: Running) -> None:
    body = {"sandbox": "sbx-9", "host": "new.example.com", "port": 443, "decision": "allow",
            "scope": "once"}  # fmt: skip
    status, made = running.call("POST", "/approvals", body)
    assert (status, made["state"], made["source"]) == (200, "allowed", "api")
    verdict = running.run(running.service.judge(("sbx-9", "new.example.com", 443), "GET", "/"))
    assert verdict.granted and verdict.approval == made["id"]
    for bad, error in (
        ({**body, "decision": "deny"}, "bad_request"),
        ({**body, "scope": "1h"}, "bad_decision_or_scope"),
        ({**body, "host": "api.example.com"}, "not_holdable"),
        ({**body, "sandbox": 3}, "bad_request"),
    ):
        assert running.call("POST", "/approvals", bad) == (400, {"error": error})


def test_off_answers_404(running: Running) -> None:
    running.config = NO_APPROVALS
    body = {"host": "new.example.com", "decision": "allow"}
    assert running.call("POST", "/approvals", body) == (404, {"error": "approvals_off"})
    assert ask_ahead(running, b'{"host": "new.example.com"}') == (404, {"error": "approvals_off"})


def test_the_cli(running: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    status, made = ask_ahead(running, b'{"host": "new.example.com"}')

    def cli(*words: str) -> int:
        args = argparse.Namespace(
            metrics=running.server.address, admin_token_file=token, action=words[0],
            id=words[1] if len(words) > 1 else None, scope=words[2] if len(words) > 2 else "once",
        )  # fmt: skip
        return approvalscli.run(args)

    assert cli("list") == 0
    assert f"{made['id']} pending sandbox=sbx-1 new.example.com:443" in capsys.readouterr().out
    assert cli("allow") == 2
    assert cli("allow", made["id"], "session") == 0
    assert f"{made['id']} allowed scope=session" in capsys.readouterr().out
    assert cli("deny", made["id"]) == 1
    assert "409 already_decided" in capsys.readouterr().err
    token.write_text("")
    token.unlink()
    assert cli("list") == 2


def test_the_token_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text(" " + TOKEN + "\n")
    assert read_token(path) == TOKEN
    for text in ("short", "two words here and more", ""):
        path.write_text(text)
        with pytest.raises(LaunchError):
            read_token(path)
    with pytest.raises(LaunchError):
        read_token(tmp_path / "missing")


def test_a_worker_holds_nothing() -> None:
    assert effective(CONFIG, None) is CONFIG
    assert effective(CONFIG, 2) is NO_APPROVALS
