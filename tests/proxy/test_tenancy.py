"""Many sandboxes in one proxy: each sandbox's decision inside the node's ceiling (1.12)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from sandbox_egress.proxy.config.loader import Entry, PatternKind, parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.sandboxes import Identify, Sandbox, SandboxesSection
from sandbox_egress.proxy.tenancy.tenants import (
    UNKNOWN,
    ConnectionQuota,
    SandboxPolicy,
    Tenancy,
    bounded,
)

ENV = {"TOKEN": "secret-value-of-the-sandbox"}


def network(*allowlist: dict[str, Any], report_only: bool = False) -> Any:
    document = {"network": {"allowlist": list(allowlist), "report_only": report_only}}
    return parse(document, "env.yaml", ENV)


def sandbox(name: str, *allowlist: dict[str, Any], report_only: bool = False) -> Sandbox:
    return Sandbox(name, network(*allowlist, report_only=report_only), sandbox_class="ci")


NODE = Policy(network({"domain": "*.example.com"}, {"domain": "10.0.0.0/8"}, {"domain": "*"}))
TIGHT_NODE = Policy(network({"domain": "a.example.com"}, {"domain": "b.example.com"}))


def decide(policy: Policy, host: str, port: int = 443, tls: bool | None = True) -> Decision:
    return policy.decide(canonical_host(host), port, tls=tls)


# -- bounded: the whole rule, as a table -------------------------------------------------

OWN = Entry(0, "a.example.com", PatternKind.EXACT, name="a.example.com")
CEILING = Entry(0, "*.example.com", PatternKind.WILDCARD, name="example.com")
ALLOW_OWN, ALLOW_NODE = Decision.allow(OWN), Decision.allow(CEILING)
DENY_OWN = Decision.deny(Reason.NOT_ALLOWLISTED)
DENY_NODE = Decision.deny(Reason.PORT_NOT_ALLOWED, CEILING)
WOULD_OWN = Decision.would_deny(Decision.deny(Reason.NOT_ALLOWLISTED))
WOULD_NODE = Decision.would_deny(Decision.deny(Reason.PORT_NOT_ALLOWED, CEILING))

BOUNDED = [
    # (id, node, own, expected)
    ("both-allow-own-entry-decides", ALLOW_NODE, ALLOW_OWN, ALLOW_OWN),
    ("own-refuses", ALLOW_NODE, DENY_OWN, DENY_OWN),
    ("node-refuses", DENY_NODE, ALLOW_OWN, DENY_NODE),
    ("both-refuse-own-named", DENY_NODE, DENY_OWN, DENY_OWN),
    ("own-would-deny", ALLOW_NODE, WOULD_OWN, WOULD_OWN),
    ("node-would-deny-injects-nothing", WOULD_NODE, ALLOW_OWN, WOULD_NODE),
    ("real-refusal-beats-would-deny", DENY_NODE, WOULD_OWN, DENY_NODE),
    ("own-refusal-beats-node-would-deny", WOULD_NODE, DENY_OWN, DENY_OWN),
    ("both-would-deny-own-named", WOULD_NODE, WOULD_OWN, WOULD_OWN),
]


@pytest.mark.parametrize(
    ("node", "own", "expected"), [c[1:] for c in BOUNDED], ids=[c[0] for c in BOUNDED]
)
def test_bounded(node: Decision, own: Decision, expected: Decision) -> None:
    result = bounded(node, own)
    assert result == expected
    assert result.injects == (expected is ALLOW_OWN)


# -- SandboxPolicy: two sandboxes on one node ----------------------------------------------

TRANSFORM = {"Authorization": "Bearer ${TOKEN}"}
ALPHA = SandboxPolicy(sandbox("alpha", {"domain": "a.example.com", "transform": TRANSFORM}), NODE)
BETA = SandboxPolicy(sandbox("beta", {"domain": "b.example.com"}, {"domain": "evil.net"}), NODE)
UNDER_TIGHT = SandboxPolicy(sandbox("wide", {"domain": "*"}), TIGHT_NODE)

DECISIONS = [
    # (id, policy, host, port, tls, reason, deciding pattern)
    ("alpha-own-host", ALPHA, "a.example.com", 443, True, Reason.ALLOWLISTED, "a.example.com"),
    ("alpha-not-beta-host", ALPHA, "b.example.com", 443, True, Reason.NOT_ALLOWLISTED, None),
    ("beta-own-host", BETA, "b.example.com", 443, True, Reason.ALLOWLISTED, "b.example.com"),
    ("beta-not-alpha-host", BETA, "a.example.com", 443, True, Reason.NOT_ALLOWLISTED, None),
    (
        "beta-own-entry-inside-node-star",
        BETA,
        "evil.net",
        443,
        True,
        Reason.ALLOWLISTED,
        "evil.net",
    ),
    (
        "alpha-plaintext-own-transform",
        ALPHA,
        "a.example.com",
        80,
        False,
        Reason.PLAINTEXT_CREDENTIALS,
        "a.example.com",
    ),
    (
        "star-sandbox-bounded-by-node",
        UNDER_TIGHT,
        "c.example.com",
        443,
        True,
        Reason.NOT_ALLOWLISTED,
        None,
    ),
    ("star-sandbox-inside-node", UNDER_TIGHT, "a.example.com", 443, True, Reason.ALLOWLISTED, "*"),
    ("loopback-always", UNDER_TIGHT, "127.0.0.1", 443, True, Reason.LOOPBACK, None),
]


@pytest.mark.parametrize(
    ("policy", "host", "port", "tls", "reason", "pattern"),
    [c[1:] for c in DECISIONS],
    ids=[c[0] for c in DECISIONS],
)
def test_sandbox_decision(
    policy: Policy, host: str, port: int, tls: bool, reason: Reason, pattern: str | None
) -> None:
    decision = decide(policy, host, port, tls)
    assert decision.reason is reason
    assert decision.rule == (pattern or "")


def test_transform_comes_from_the_sandbox_entry_never_the_node() -> None:
    node = Policy(network({"domain": "a.example.com", "transform": {"X-Node": "${TOKEN}"}}))
    plain = SandboxPolicy(sandbox("plain", {"domain": "a.example.com"}), node)
    decision = decide(plain, "a.example.com")
    assert decision.injects and decision.entry is not None
    assert decision.entry.transform == ()
    assert decide(ALPHA, "a.example.com").entry.transform[0].header == "Authorization"  # type: ignore[union-attr]


def test_sandbox_report_only_is_its_own() -> None:
    watching = SandboxPolicy(sandbox("w", {"domain": "a.example.com"}, report_only=True), NODE)
    assert decide(watching, "b.example.com").verdict == "would_deny"
    assert decide(BETA, "c.example.com").verdict == "deny"  # the other sandbox enforces


ADDR = ipaddress.ip_address


def test_internal_address_needs_both_node_and_sandbox() -> None:
    opened = SandboxPolicy(
        sandbox("o", {"domain": "*.example.com"}, {"domain": "10.1.0.0/16"}), NODE
    )
    closed = SandboxPolicy(sandbox("c", {"domain": "*.example.com"}), NODE)
    allow = decide(opened, "x.example.com")
    assert opened.pick_address(allow, [ADDR("10.1.2.3")], 443) == (allow, ADDR("10.1.2.3"))
    refused, address = closed.pick_address(allow, [ADDR("10.1.2.3")], 443)
    assert (refused.reason, address) == (Reason.INTERNAL_ADDRESS, None)
    # the node does not open 192.168/16: the sandbox's own entry cannot either
    wide = SandboxPolicy(
        sandbox("x", {"domain": "*.example.com"}, {"domain": "192.168.0.0/16"}), NODE
    )
    refused, address = wide.pick_address(allow, [ADDR("192.168.1.1"), ADDR("93.184.216.34")], 443)
    assert address == ADDR("93.184.216.34")
    refused, address = wide.pick_address(allow, [ADDR("192.168.1.1")], 443)
    assert (refused.reason, address) == (Reason.INTERNAL_ADDRESS, None)
    refused, address = wide.pick_address(allow, [], 443)
    assert (refused.reason, address) == (Reason.DNS_FAILURE, None)


# -- Tenancy: one snapshot, lookups by id and address --------------------------------------

SECTION = SandboxesSection(directory=__import__("pathlib").Path("/nonexistent"))


def tenancy_of(*sandboxes: Sandbox, node: Policy = NODE) -> Tenancy:
    found = {s.id: s for s in sandboxes}
    return Tenancy(SECTION, node).rebuilt(found, node, frozenset(found))


def test_unknown_sandbox_refuses_everything() -> None:
    tenancy = tenancy_of(sandbox("alpha", {"domain": "*"}))
    assert tenancy.policy(None) is UNKNOWN
    assert tenancy.policy("nobody") is UNKNOWN
    assert decide(UNKNOWN, "a.example.com").reason is Reason.UNKNOWN_SANDBOX
    assert decide(tenancy.policy("alpha"), "a.example.com").allowed


def test_rebuilt_shares_unchanged_policies_and_rebuilds_for_a_new_node() -> None:
    alpha = sandbox("alpha", {"domain": "a.example.com"})
    beta = sandbox("beta", {"domain": "b.example.com"})
    first = tenancy_of(alpha, beta)
    changed_beta = sandbox("beta", {"domain": "c.example.com"})
    second = first.rebuilt({"alpha": alpha, "beta": changed_beta}, NODE, frozenset({"beta"}))
    assert second.policies["alpha"] is first.policies["alpha"]
    assert decide(second.policy("beta"), "c.example.com").allowed
    assert not decide(second.policy("beta"), "b.example.com").allowed
    removed = second.rebuilt({"alpha": alpha}, NODE, frozenset())
    assert removed.policy("beta") is UNKNOWN
    tight = removed.rebuilt({"alpha": alpha}, TIGHT_NODE, frozenset())
    assert tight.policies["alpha"] is not removed.policies["alpha"]
    assert tight.policies["alpha"].node is TIGHT_NODE


def test_claimant_by_address_and_ipv4_mapped() -> None:
    tenancy = tenancy_of(Sandbox("a", network(), addresses=frozenset({ADDR("198.18.0.2")})))
    assert tenancy.claimant(ADDR("198.18.0.2")) == "a"
    assert tenancy.claimant(ADDR("::ffff:198.18.0.2")) == "a"
    assert tenancy.claimant(ADDR("198.18.0.3")) is None
    assert tenancy.section.identify == (Identify.PROXY_AUTH, Identify.SOURCE_ADDRESS)


def test_connection_quota_is_per_sandbox() -> None:
    quota = ConnectionQuota()
    assert [quota.acquire("a", 2) for _ in range(3)] == [True, True, False]
    assert quota.acquire("b", 2)  # another sandbox is not affected
    quota.release("a")
    assert quota.open("a") == 1
    assert quota.acquire("a", 2)
    quota.release("b")
    quota.release("b")  # more releases than acquires never go below zero
    assert quota.open("b") == 0


def test_with_clause_and_with_node_keep_every_other_field() -> None:
    import dataclasses

    # The two copy helpers name each field: a new field must be added to them too.
    assert [f.name for f in dataclasses.fields(Decision)] == [
        "allowed", "reason", "entry", "report", "clause", "node",
    ]  # fmt: skip
    node = Decision.allow(CEILING)
    own = Decision.would_deny(Decision.deny(Reason.RULE_MISMATCH, OWN, "rules[0]"))
    assert own.with_clause("deny[1]") == dataclasses.replace(own, clause="deny[1]")
    assert own.with_node(node).node is node
    assert own.with_node(node).with_clause("x").node is node
    assert own.with_node(node) == own  # the node's decision is carried, not compared
