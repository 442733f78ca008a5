"""`GET /usage` on the admin API in one process (runtime/usageapi.py, runtime/admin.py,
common/serve.py, proxy/llm/ledger.py): a real metrics server on loopback, the proxy's
memory on an event loop of its own thread, approvals off; the bearer token (401 without
it or with another), the answer, one sandbox, every error answer; the parent of
`--workers N` answering from the node's memory (`NodeUsage`)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sandbox_egress.common.serve import MetricsServer
from sandbox_egress.proxy.approvals.settings import NO_APPROVALS
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.state.node import NodeService
from sandbox_egress.runtime import usage
from sandbox_egress.runtime.usageapi import NodeUsage
from tests.runtime.test_admin_api import TOKEN, Running

LLM = {
    "network": {
        "allowlist": [
            {
                "domain": "api.openai.com",
                "llm": {"api": "openai", "budget": {"tokens": "1000/day"}},
            },
            {"domain": "api.anthropic.com", "llm": {"api": "anthropic"}},  # no budget
        ]
    }
}
NETWORK = parse(LLM, "f.yaml", {})
TOKENS = [["llm_tokens", 1000, 86400]]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def running() -> Iterator[Running]:
    found = Running(NO_APPROVALS)  # approvals off: /usage needs only the token (D571)
    found.gate.shared.policy = Policy(NETWORK)
    found.gate.shared.state = MemoryState(Clock())
    try:
        yield found
    finally:
        found.close()


def charge(state: MemoryState, spender: str, tokens: int) -> None:
    from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate

    state.charge_now(
        BudgetKey(spender, "api.openai.com"), (("llm_tokens", Rate(1000, 86400), tokens),)
    )


def bare(
    server: MetricsServer, method: str, target: str, headers: dict[str, str]
) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request(method, target, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def row(sandbox: str, level: float) -> dict[str, Any]:
    budgets = [{"kind": "llm_tokens", "amount": 1000, "window_s": 86400, "level": level}]
    return {"sandbox": sandbox, "entry": "api.openai.com", "budgets": budgets}


def test_the_token_is_required_and_nothing_is_said_without_it(running: Running) -> None:
    charge(running.gate.shared.state, "sb-a", 250)
    unauthorized = (401, b'{"error": "unauthorized"}\n')
    server = running.server
    assert bare(server, "GET", "/usage", {}) == unauthorized
    assert (
        bare(server, "GET", "/usage?sandbox=sb-a", {"Authorization": f"Bearer {TOKEN}x"})
        == unauthorized
    )
    assert bare(server, "GET", "/usage", {"Authorization": f"bearer {TOKEN}"}) == unauthorized
    assert bare(server, "GET", "/usage", {"Authorization": TOKEN}) == unauthorized
    assert running.call("GET", "/usage", token="wrong-token-0123456789") == (
        401,
        {"error": "unauthorized"},
    )
    running.server.admin = None  # no --admin-token-file: not served at all
    assert bare(server, "GET", "/usage", {"Authorization": f"Bearer {TOKEN}"})[0] == 404


def test_each_spenders_levels_and_one_sandbox(running: Running) -> None:
    state = running.gate.shared.state
    charge(state, "sb-b", 40)
    charge(state, "sb-a", 250)
    charge(state, "client-10.0.0.2", 1200)
    assert running.call("GET", "/usage") == (
        200, {"usage": [row("client-10.0.0.2", -200.0), row("sb-a", 750.0), row("sb-b", 960.0)]},
    )  # fmt: skip
    assert running.call("GET", "/usage?sandbox=sb-a") == (200, {"usage": [row("sb-a", 750.0)]})
    assert running.call("GET", "/usage?sandbox=nobody") == (200, {"usage": []})
    status, document = running.call("GET", "/usage")
    assert usage.lines(document) == [
        "client-10.0.0.2\tapi.openai.com\ttokens 1200 of 1000/day (0 left)",
        "sb-a\tapi.openai.com\ttokens 250 of 1000/day (750 left)",
        "sb-b\tapi.openai.com\ttokens 40 of 1000/day (960 left)",
    ]
    host, port = running.server.address
    assert usage.ask(host, port, TOKEN, "sb-b") == (0, [usage.lines(document)[2]])
    assert usage.ask(host, port, "wrong-token-0123456789", None) == (
        1, ["egress-proxy: usage: 401 unauthorized"],
    )  # fmt: skip


def test_error_answers(running: Running) -> None:
    for query in ("?sandbox=", "?who=sb-a", "?sandbox=a&sandbox=b", "?sandbox"):
        assert running.call("GET", f"/usage{query}") == (400, {"error": "bad_request"})
    assert running.call("POST", "/usage", {}) == (405, {"error": "method_not_allowed"})
    assert running.call("GET", "/usage/x")[0] == 404  # not the API's path
    running.gate.shared.state = object()  # Redis (a Fallback): the CLI reads the store itself
    assert running.call("GET", "/usage") == (409, {"error": "state_in_store"})


def test_the_parent_of_workers_answers_from_the_nodes_memory(tmp_path: Path) -> None:
    node = NodeService(tmp_path / "budgets.sock")  # answered directly: no socket needed
    ask = {"op": "charge", "sandbox": "client-10.0.0.2", "entry": "api.openai.com",
           "charges": [["llm_tokens", 1000, 86400, 300]]}  # fmt: skip
    assert json.loads(node.answer(json.dumps(ask).encode())) == {"ok": True}
    server = MetricsServer(("127.0.0.1", 0), CollectorRegistry())
    server.admin = NodeUsage(node, TOKEN, lambda: NETWORK)
    server.start()
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status, body = bare(server, "GET", "/usage", auth)
        assert status == 200
        [only] = json.loads(body)["usage"]
        assert (only["sandbox"], only["budgets"][0]["level"]) == (
            "client-10.0.0.2",
            pytest.approx(700, abs=0.1),
        )
        assert bare(server, "GET", "/usage?sandbox=other", auth) == (200, b'{"usage": []}\n')
        assert bare(server, "GET", "/usage", {})[0] == 401
        assert bare(server, "POST", "/usage", auth)[0] == 405
        assert bare(server, "GET", "/usage?x=1", auth)[0] == 400
        assert bare(server, "GET", "/approvals", auth)[0] == 404  # a worker's parent holds none
    finally:
        server.stop()


def test_a_cut_answer_says_so(
    running: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sandbox_egress.proxy.llm import ledger

    monkeypatch.setattr(ledger, "MAX_ROWS", 1)
    charge(running.gate.shared.state, "sb-a", 250)
    charge(running.gate.shared.state, "sb-b", 40)
    host, port = running.server.address
    assert usage.ask(host, port, TOKEN, None) == (
        0, ["sb-a\tapi.openai.com\ttokens 250 of 1000/day (750 left)"],
    )  # fmt: skip
    assert capsys.readouterr().err == (
        "egress-proxy: usage: the first 1 only (--sandbox ID for one)\n"
    )
