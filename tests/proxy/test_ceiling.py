"""The node's ceiling over a sandbox's connections (proxy/tenancy/ceiling.py, issue 30).

One row per pair (the node's entry kind x the sandbox's entry kind) for the same
destination: what the CONNECT and ClientHello stages do with the tunnel (relay, intercept,
or refuse with a reason), what two requests inside an intercepted tunnel get (a `DELETE`
and a git push), and what raw TCP to the destination gets. A sandbox's tunnel is relayed
only when the node's entry would relay it too; nothing a sandbox file says lifts the
node's rules, git items or `require`. The resolver is a table: nothing touches a socket.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.rulestage import decide_rules
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import (
    ConnectionFacts,
    Hello,
    RequestAsk,
    decide_clienthello,
    decide_connect,
    decide_request,
    decide_tcp,
)
from sandbox_egress.proxy.targets import RequestNames
from sandbox_egress.proxy.tenancy.sandboxes import Sandbox
from sandbox_egress.proxy.tenancy.tenants import SandboxPolicy

NAME = "api.example"
NAME_ADDRESS = "93.184.216.34"
ADDRESS = "93.184.216.40"  # public: the node's `*` allows it, like an address entry
NODE_PLACEHOLDER = "node-placeholder-api"
OWN_PLACEHOLDER = "sbx-placeholder-api"


def kinds(placeholder: str) -> dict[str, dict[str, Any]]:
    return {
        "plain": {"domain": NAME},
        "rules": {"domain": NAME, "rules": [{"methods": ["GET"]}]},
        "git": {"domain": NAME, "git": {"fetch": ["acme/*"]}},  # no push at all
        "require": {
            "domain": NAME,
            "secrets": [{"placeholder": placeholder, "value": "${T}", "require": True}],
        },
        "passthrough": {"domain": NAME, "passthrough": True},
        "address": {"domain": "93.184.216.0/24"},
        "address-rules": {"domain": "93.184.216.0/24", "rules": [{"methods": ["GET"]}]},
    }


NODE_KINDS = {**kinds(NODE_PLACEHOLDER), "absent": {"domain": "*"}}
OWN_KINDS = {**kinds(OWN_PLACEHOLDER), "absent": {"domain": "other.example"}}
ADDRESS_KINDS = {"address", "address-rules"}


def sandbox_policy(node: str, own: str) -> SandboxPolicy:
    environ = {"T": "ceiling-secret-value"}
    node_config = parse({"network": {"allowlist": [NODE_KINDS[node]]}}, "node.yaml", environ)
    own_config = parse({"network": {"allowlist": [OWN_KINDS[own]]}}, "sbx.yaml", environ)
    return SandboxPolicy(Sandbox("sbx", own_config), Policy(node_config))


async def resolve(name: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address(NAME_ADDRESS)]


A, NA = Reason.ALLOWLISTED, Reason.NOT_ALLOWLISTED
RM, GP, CR = Reason.RULE_MISMATCH, Reason.GIT_PUSH_DENIED, Reason.CREDENTIAL_REQUIRED
I, R = "intercept", "relay"  # noqa: E741

# (node kind, sandbox kind): (tunnel, DELETE inside, git push inside, raw TCP).
# The tunnel is "relay", "intercept" or the CONNECT's refusal; the requests are decided
# only inside an intercepted tunnel (None otherwise); raw TCP is ALLOWLISTED when relayed.
# The destination is the address when either side is an address entry, else the name.
PAIRS: dict[tuple[str, str], tuple[str | Reason, Reason | None, Reason | None, Reason]] = {
    ("plain", "plain"): (I, A, A, NA),
    ("plain", "rules"): (I, RM, RM, NA),
    ("plain", "git"): (I, A, GP, NA),
    ("plain", "require"): (I, CR, CR, NA),
    ("plain", "passthrough"): (I, A, A, NA),
    ("plain", "address"): (NA, None, None, NA),
    ("plain", "address-rules"): (NA, None, None, NA),
    ("plain", "absent"): (NA, None, None, NA),
    ("rules", "plain"): (I, RM, RM, NA),
    ("rules", "rules"): (I, RM, RM, NA),
    ("rules", "git"): (I, RM, GP, NA),
    ("rules", "require"): (I, RM, RM, NA),
    ("rules", "passthrough"): (I, RM, RM, NA),
    ("rules", "address"): (NA, None, None, NA),
    ("rules", "address-rules"): (NA, None, None, NA),
    ("rules", "absent"): (NA, None, None, NA),
    ("git", "plain"): (I, A, GP, NA),
    ("git", "rules"): (I, RM, RM, NA),
    ("git", "git"): (I, A, GP, NA),
    ("git", "require"): (I, CR, GP, NA),
    ("git", "passthrough"): (I, A, GP, NA),
    ("git", "address"): (NA, None, None, NA),
    ("git", "address-rules"): (NA, None, None, NA),
    ("git", "absent"): (NA, None, None, NA),
    ("require", "plain"): (I, CR, CR, NA),
    ("require", "rules"): (I, RM, RM, NA),
    ("require", "git"): (I, CR, GP, NA),
    ("require", "require"): (I, CR, CR, NA),
    ("require", "passthrough"): (I, CR, CR, NA),
    ("require", "address"): (NA, None, None, NA),
    ("require", "address-rules"): (NA, None, None, NA),
    ("require", "absent"): (NA, None, None, NA),
    ("passthrough", "plain"): (I, A, A, NA),
    ("passthrough", "rules"): (I, RM, RM, NA),
    ("passthrough", "git"): (I, A, GP, NA),
    ("passthrough", "require"): (I, CR, CR, NA),
    ("passthrough", "passthrough"): (R, None, None, NA),  # the one relay: both pass through
    ("passthrough", "address"): (NA, None, None, NA),
    ("passthrough", "address-rules"): (NA, None, None, NA),
    ("passthrough", "absent"): (NA, None, None, NA),
    ("address", "plain"): (NA, None, None, NA),
    ("address", "rules"): (NA, None, None, NA),
    ("address", "git"): (NA, None, None, NA),
    ("address", "require"): (NA, None, None, NA),
    ("address", "passthrough"): (NA, None, None, NA),
    ("address", "address"): (I, A, A, A),  # the one raw TCP relay: both open it bare
    ("address", "address-rules"): (I, RM, RM, RM),
    ("address", "absent"): (NA, None, None, NA),
    ("address-rules", "plain"): (NA, None, None, NA),
    ("address-rules", "rules"): (NA, None, None, NA),
    ("address-rules", "git"): (NA, None, None, NA),
    ("address-rules", "require"): (NA, None, None, NA),
    ("address-rules", "passthrough"): (NA, None, None, NA),
    ("address-rules", "address"): (I, RM, RM, RM),
    ("address-rules", "address-rules"): (I, RM, RM, RM),
    ("address-rules", "absent"): (NA, None, None, NA),
    ("absent", "plain"): (I, A, A, NA),
    ("absent", "rules"): (I, RM, RM, NA),
    ("absent", "git"): (I, A, GP, NA),
    ("absent", "require"): (I, CR, CR, NA),
    ("absent", "passthrough"): (I, A, A, NA),
    ("absent", "address"): (I, A, A, NA),  # `*` opens no raw TCP, for a sandbox neither
    ("absent", "address-rules"): (I, RM, RM, RM),
    ("absent", "absent"): (NA, None, None, NA),
}


def test_the_table_covers_every_pair() -> None:
    assert set(PAIRS) == {(n, o) for n in NODE_KINDS for o in OWN_KINDS}


def destination(node: str, own: str) -> str:
    return ADDRESS if {node, own} & ADDRESS_KINDS else NAME


def request(host: str, facts: ConnectionFacts, method: str, path: str) -> RequestAsk:
    names = RequestNames(
        transparent=False,
        host=host,
        port=443,
        host_header=host,
        sni=None,
        client_tls=True,
        target=facts.target,
        sni_malformed=False,
        method=method,
        path=path,
    )
    fields = ((b"Host", host.encode()), (b"Authorization", b"Bearer the-sandboxs-own-key"))
    return RequestAsk(method.encode(), fields, names, https=True)


def tunnel(policy: Policy, host: str) -> tuple[str | Reason, ConnectionFacts]:
    answer = asyncio.run(decide_connect(policy, resolve, ConnectionFacts(), host, 443))
    if not answer.decision.allowed:
        return answer.decision.reason, answer.facts
    sni = None if canonical_host(host).ip is not None else host
    hello = Hello(transparent=False, sni=sni, sni_sent=sni is not None, alpn=(), destination=None)
    answered = asyncio.run(decide_clienthello(policy, resolve, answer.facts, hello))
    return (R if answered.relay else I), answered.facts


@pytest.mark.parametrize(("node", "own"), list(PAIRS), ids=[f"{n}-x-{o}" for n, o in PAIRS])
def test_a_sandbox_file_never_lifts_the_nodes_ceiling(node: str, own: str) -> None:
    expected_tunnel, expected_delete, expected_push, expected_tcp = PAIRS[node, own]
    policy, host = sandbox_policy(node, own), destination(node, own)
    decided, facts = tunnel(policy, host)
    assert decided == expected_tunnel
    answers: list[Reason | None] = []
    for method, path in (("DELETE", "/repos/acme/web"), ("POST", "/acme/web.git/git-receive-pack")):
        if decided == I:
            answer = asyncio.run(
                decide_request(policy, resolve, facts, request(host, facts, method, path))
            )
            answers.append(answer.decision.reason)
            assert (answer.pin is not None) is (answer.decision.reason is A)
        else:
            answers.append(None)
    assert answers == [expected_delete, expected_push]
    # Raw TCP: to the address the transparent way, through a tunnel to a name.
    transparent = canonical_host(host).ip is not None
    facts = ConnectionFacts(target=(canonical_host(host), 443))
    raw = decide_tcp(policy, facts, transparent, (host, 443))
    assert raw.decision.reason is expected_tcp
    assert (raw.pin is not None) is (expected_tcp is A)


@pytest.mark.parametrize("node", list(NODE_KINDS))
@pytest.mark.parametrize("own", ["passthrough", "plain", "require"])
def test_transparent_mode_relays_only_what_the_node_relays(node: str, own: str) -> None:
    policy = sandbox_policy(node, own)
    hello = Hello(
        transparent=True, sni=NAME, sni_sent=True, alpn=(), destination=(NAME_ADDRESS, 443)
    )
    answer = asyncio.run(decide_clienthello(policy, resolve, ConnectionFacts(), hello))
    assert answer.relay is (node == own == "passthrough")
    assert answer.facts.passthrough is answer.relay


def with_placeholder(ask: RequestAsk, placeholder: str) -> RequestAsk:
    fields = ((b"Host", NAME.encode()), (b"Authorization", f"Bearer {placeholder}".encode()))
    return replace(ask, fields=fields)


NODE_REQUIRES = [
    # (id, sandbox entry, what the request carries, reason)
    ("own-placeholder-swapped", OWN_KINDS["require"], OWN_PLACEHOLDER, A),
    ("own-transform-written", {"domain": NAME, "transform": {"Authorization": "Bearer ${T}"}},
     "the-sandboxs-own-key", A),
    ("own-credential", OWN_KINDS["plain"], "the-sandboxs-own-key", CR),
    ("nodes-placeholder-is-not-swapped-for-a-sandbox", OWN_KINDS["plain"], NODE_PLACEHOLDER,
     Reason.PLACEHOLDER_ELSEWHERE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "carried", "reason"),
    [c[1:] for c in NODE_REQUIRES],
    ids=[c[0] for c in NODE_REQUIRES],
)
def test_the_nodes_require_holds_for_a_sandbox(
    entry: dict[str, Any], carried: str, reason: Reason
) -> None:
    """The node's `require` asks for a credential the proxy writes: the sandbox's entry must
    swap or write one (its own secrets and transforms), never the sandbox's own key."""
    environ = {"T": "ceiling-secret-value"}
    node = parse({"network": {"allowlist": [NODE_KINDS["require"]]}}, "node.yaml", environ)
    own = parse({"network": {"allowlist": [entry]}}, "sbx.yaml", environ)
    policy = SandboxPolicy(Sandbox("sbx", own), Policy(node))
    ask = with_placeholder(request(NAME, ConnectionFacts(), "GET", "/v1/models"), carried)
    answer = asyncio.run(decide_request(policy, resolve, ConnectionFacts(), ask))
    assert answer.decision.reason is reason


# -- the same, over generated entries -------------------------------------------------------

DOMAINS = [NAME, "*.example", "*", "93.184.216.0/24", "93.184.216.40"]
FEATURES = st.fixed_dictionaries(
    {},
    optional={
        "passthrough": st.just(True),
        "rules": st.sampled_from([[{"methods": ["GET"]}], [{"paths": ["/repos/**"]}]]),
        "deny": st.just([{"methods": ["DELETE"]}]),
        "git": st.sampled_from(
            [{"fetch": ["acme/*"]}, {"push": [{"repo": "acme/*", "refs": ["**"]}]}]
        ),
        "require": st.just(True),
    },
)
REQUESTS = st.sampled_from(
    [("GET", "/"), ("DELETE", "/repos/acme/web"), ("POST", "/acme/web.git/git-receive-pack"),
     ("POST", "/evil/web.git/git-upload-pack"), ("PUT", "/repos/x")]
)  # fmt: skip


def entry_of(domain: str, features: dict[str, Any], placeholder: str) -> dict[str, Any] | None:
    """An entry the loader accepts, or None (a combination it refuses)."""
    entry: dict[str, Any] = {"domain": domain}
    require = features.get("require")
    entry.update({k: v for k, v in features.items() if k != "require"})
    if require:
        entry["secrets"] = [{"placeholder": placeholder, "value": "${T}", "require": True}]
    judged = {"rules", "deny", "git", "secrets"} & set(entry)
    if entry.get("passthrough") and judged or ("secrets" in entry and domain == "*"):
        return None
    return entry


@settings(max_examples=300, deadline=None)
@given(
    node_domain=st.sampled_from(DOMAINS),
    node_features=FEATURES,
    own_domain=st.sampled_from(DOMAINS),
    own_features=FEATURES,
    asked=REQUESTS,
)
def test_a_sandbox_is_never_let_through_where_its_node_alone_would_not_be(
    node_domain: str,
    node_features: dict[str, Any],
    own_domain: str,
    own_features: dict[str, Any],
    asked: tuple[str, str],
) -> None:
    """Whatever the two entries: a sandbox's tunnel is relayed only when the node alone
    relays it, its raw TCP opens only where the node alone opens it, and a request inside
    is allowed only when the node's entry judges it allowed too."""
    node_entry = entry_of(node_domain, node_features, NODE_PLACEHOLDER)
    own_entry = entry_of(own_domain, own_features, OWN_PLACEHOLDER)
    assume(node_entry is not None and own_entry is not None)
    environ = {"T": "ceiling-secret-value"}
    node = Policy(parse({"network": {"allowlist": [node_entry]}}, "node.yaml", environ))
    own = parse({"network": {"allowlist": [own_entry]}}, "sbx.yaml", environ)
    policy = SandboxPolicy(Sandbox("sbx", own), node)
    for host in (NAME, ADDRESS):
        decided, facts = tunnel(policy, host)
        alone, node_facts = tunnel(node, host)
        if decided == R:
            assert alone == R
        facts = ConnectionFacts(target=(canonical_host(host), 443))
        transparent = canonical_host(host).ip is not None
        if decide_tcp(policy, facts, transparent, (host, 443)).decision.allowed:
            assert decide_tcp(node, facts, transparent, (host, 443)).decision.allowed
        if decided != I:
            continue
        method, path = asked
        ask = request(host, facts, method, path)
        answer = asyncio.run(decide_request(policy, resolve, facts, ask))
        if answer.decision.allowed:
            ceiling = node.decide(canonical_host(host), 443, tls=True)
            judged, _ = decide_rules(node, ceiling, method, path)
            assert judged.allowed, (node_entry, own_entry, asked)
            if any(s.require for s in (ceiling.entry.secrets if ceiling.entry else ())):
                assert answer.swapped or answer.transforms  # a credential the proxy holds
