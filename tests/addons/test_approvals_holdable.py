"""Property: no refusal other than `not_allowlisted` ever creates an approval
(addons/approvals.py, proxy/approvals/judge.py).

Two levels: every reason of the closed set, allowed or not, with or without a node's
decision (a ceiling's refusal is never held); and the real stages — a policy, CONNECT
authorities and plain requests in every spelling the fuzzers use (loopback in decimal,
hex and IPv6, internal and metadata addresses, fronting tricks) — where the book gains an
approval exactly when the stage said `not_allowlisted`.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_egress.addons.approvals import ApprovalGate
from sandbox_egress.proxy.approvals.judge import holdable
from sandbox_egress.proxy.approvals.scopes import ONCE
from sandbox_egress.proxy.approvals.service import Approvals
from sandbox_egress.proxy.approvals.settings import ApprovalsConfig
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import (
    ConnectAnswer,
    ConnectionFacts,
    RequestAnswer,
    RequestAsk,
    decide_connect,
    decide_request,
)
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.targets import RequestNames
from testbed.fuzz_strategies import AUTHORITIES

CONFIG = {
    "network": {
        "allowlist": [
            {"domain": "api.allowed.test", "transform": {"X-Key": "v"}},
            {"domain": "ports.allowed.test", "ports": [8443]},
            {"domain": "*.wild.test"},
            {"domain": "10.9.0.0/16"},
        ]
    }
}
MORE = [
    "10.1.2.3", "10.9.1.1", "169.254.169.254", "metadata.google.internal", "localhost",
    "x.localhost", "100.100.100.200", "[fd00:ec2::254]", "0.0.0.0", "224.0.0.1",
    "rebind.test", "public.example", "203.0.113.9", "x.wild.test", "ports.allowed.test",
]  # fmt: skip
HOSTS = st.sampled_from(AUTHORITIES + MORE)
PORTS = st.sampled_from([80, 443, 8443, 22])
ADDRESSES = {"rebind.test": ["127.0.0.1"], "public.example": ["203.0.113.7"]}


async def resolve(name: str, port: int) -> list[IPAddress]:
    import ipaddress

    return [ipaddress.ip_address(a) for a in ADDRESSES.get(name, ["198.18.1.2"])]


def gate() -> ApprovalGate:
    config = ApprovalsConfig(True, 0.01, 1000, (ONCE,), ())
    service = Approvals(MemoryState(), ProxyMetrics().approvals, lambda: config)
    return ApprovalGate(cast(Any, SimpleNamespace()), service)


def flow() -> Any:
    return SimpleNamespace(metadata={}, client_conn=SimpleNamespace(id="c1"))


def names(host: str, port: int) -> RequestNames:
    return RequestNames(
        transparent=False, host=host, port=port, host_header=host, sni=None,
        client_tls=False, target=None, method="GET", path="/",
    )  # fmt: skip


DECISIONS = st.builds(
    lambda reason, allowed, node: Decision(allowed, reason, node=node),
    st.sampled_from(list(Reason)),
    st.booleans(),
    st.none()
    | st.builds(lambda r, a: Decision(a, r), st.sampled_from(list(Reason)), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(DECISIONS)
def test_only_not_allowlisted_within_the_ceiling_is_holdable(decision: Decision) -> None:
    expected = (
        not decision.allowed
        and decision.reason is Reason.NOT_ALLOWLISTED
        and (decision.node is None or decision.node.allowed)
    )
    assert holdable(decision) is expected
    found = gate()
    answer = ConnectAnswer(decision, "h.example", 443, ConnectionFacts())
    policy = Policy(parse(CONFIG, "t.yaml", {}))
    after = asyncio.run(found.connect(cast(Any, None), policy, resolve, ConnectionFacts(), answer))
    assert (found.service.book.all() != []) is expected
    assert (after is answer) is not expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTS, PORTS)
def test_a_connect_is_held_only_when_the_stage_says_not_allowlisted(host: str, port: int) -> None:
    async def run() -> tuple[Reason, int, Reason]:
        policy, found = Policy(parse(CONFIG, "t.yaml", {})), gate()
        facts = ConnectionFacts()
        answer = await decide_connect(policy, resolve, facts, host, port)
        after = await found.connect(cast(Any, None), policy, resolve, facts, answer)
        return answer.decision.reason, len(found.service.book.all()), after.decision.reason

    reason, opened, after = asyncio.run(run())
    assert opened == (1 if reason is Reason.NOT_ALLOWLISTED else 0)
    assert after is (Reason.APPROVAL_TIMEOUT if opened else reason)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTS, PORTS, st.booleans())
def test_a_request_is_held_only_when_the_stage_says_not_allowlisted(
    host: str, port: int, https: bool
) -> None:
    async def run() -> tuple[Reason, int, RequestAnswer]:
        policy, found = Policy(parse(CONFIG, "t.yaml", {})), gate()
        facts = ConnectionFacts()
        ask = RequestAsk(
            b"GET", ((b"host", host.encode("utf-8", "replace")),), names(host, port), https
        )
        answer = await decide_request(policy, resolve, facts, ask)
        after = await found.request(flow(), policy, resolve, facts, ask, answer)
        return answer.decision.reason, len(found.service.book.all()), after

    reason, opened, after = asyncio.run(run())
    assert opened == (1 if reason is Reason.NOT_ALLOWLISTED else 0)
    if opened:
        assert after.decision.reason is Reason.APPROVAL_TIMEOUT
    elif reason is not Reason.NOT_ALLOWLISTED:
        assert after.decision.reason is reason
