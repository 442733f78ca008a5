"""A granted destination judged like an entry naming just that host (proxy/approvals/judge.py):
named cases through the real request stage — no transform written, a placeholder sent to
it refused, a name resolving to loopback or into a CIDR entry's range decided by the
address stage, an IP grant, and a sandbox still bound by its node's ceiling."""

from __future__ import annotations

import asyncio
import ipaddress

from sandbox_egress.proxy.approvals.judge import granted, holdable
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import Host, IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, RequestAnswer, RequestAsk, decide_request
from sandbox_egress.proxy.targets import RequestNames
from sandbox_egress.proxy.tenancy.sandboxes import Sandbox
from sandbox_egress.proxy.tenancy.tenants import SandboxPolicy

PLACEHOLDER = "ph-approvals-0123456789abcdef"
FILE = {
    "network": {
        "allowlist": [
            {"domain": "api.example.com", "transform": {"X-Key": "secret-value-1"},
             "secrets": [{"placeholder": PLACEHOLDER, "value": "real-value-0123456789"}]},
            {"domain": "10.9.0.0/16"},
        ]
    }
}  # fmt: skip
ADDRESSES = {"new.example.com": "93.184.216.34", "rebind.example": "127.0.0.1",
             "inside.example": "10.9.1.1", "other.example": "10.7.1.1"}  # fmt: skip


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address(ADDRESSES[name])]


def ask(host: str, port: int = 80, headers: tuple[tuple[bytes, bytes], ...] = ()) -> RequestAsk:
    names = RequestNames(
        transparent=False, host=host, port=port, host_header=host, sni=None,
        client_tls=False, target=None, method="GET", path="/",
    )  # fmt: skip
    return RequestAsk(b"GET", ((b"host", host.encode()), *headers), names, False)


def judged(
    policy: Policy, host: str, port: int = 80, *headers: tuple[bytes, bytes]
) -> RequestAnswer:
    under = granted(policy, canonical_host(host), port, "ap-0123456789abcdef")
    return asyncio.run(decide_request(under, resolve, ConnectionFacts(), ask(host, port, headers)))


def test_a_granted_name_is_allowed_with_nothing_written() -> None:
    answer = judged(Policy(parse(FILE, "f.yaml", {})), "new.example.com")
    assert answer.decision.allowed and answer.transforms == () and answer.credentials == ()
    assert (
        answer.decision.entry is not None
        and answer.decision.entry.approval == "ap-0123456789abcdef"
    )
    assert answer.pin is not None and answer.pin.address == ("93.184.216.34", 80)


def test_only_the_granted_port() -> None:
    policy = granted(
        Policy(parse(FILE, "f.yaml", {})), canonical_host("new.example.com"), 443, "ap-1"
    )
    answer = asyncio.run(
        decide_request(policy, resolve, ConnectionFacts(), ask("new.example.com", 80))
    )
    assert answer.decision.reason is Reason.PORT_NOT_ALLOWED


def test_a_placeholder_sent_to_it_is_refused() -> None:
    answer = judged(
        Policy(parse(FILE, "f.yaml", {})), "new.example.com", 80, (b"x-token", PLACEHOLDER.encode())
    )
    assert answer.decision.reason is Reason.PLACEHOLDER_ELSEWHERE


def test_the_address_stage_still_decides() -> None:
    policy = Policy(parse(FILE, "f.yaml", {}))
    assert judged(policy, "rebind.example").decision.reason is Reason.LOOPBACK
    assert judged(policy, "other.example").decision.reason is Reason.INTERNAL_ADDRESS
    assert judged(policy, "inside.example").decision.allowed  # a CIDR entry of the file opens it


def test_an_address_grant() -> None:
    answer = judged(Policy(parse(FILE, "f.yaml", {})), "203.0.113.9")
    assert answer.decision.allowed and answer.pin is not None
    assert answer.pin.address == ("203.0.113.9", 80)


def test_a_sandbox_is_held_only_within_its_node_and_granted_within_it() -> None:
    node = Policy(parse({"network": {"allowlist": ["*.example.com"]}}, "node.yaml", {}))
    own = parse({"network": {"allowlist": ["api.example.com"]}}, "sbx.yaml", {})
    sandbox = SandboxPolicy(Sandbox("sbx-1", own), node)
    inside = sandbox.decide(Host("new.example.com", None), 80, tls=False)
    outside = sandbox.decide(Host("new.example.org", None), 80, tls=False)
    assert inside.reason is outside.reason is Reason.NOT_ALLOWLISTED
    assert holdable(inside) and not holdable(outside)  # the node's own refusal is a ceiling
    answer = judged(sandbox, "new.example.com")
    assert answer.decision.allowed and answer.transforms == ()
