"""A policy remembers the decisions of names (issue 36): the same answers as computed, for
a node's policy and a sandbox's inside its node, and never an answer of another snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import DECIDED_ENTRIES, Policy
from sandbox_egress.proxy.tenancy.sandboxes import Sandbox, SandboxesSection
from sandbox_egress.proxy.tenancy.tenants import SandboxPolicy, Tenancy

ENV = {"TOKEN": "secret-value-of-the-tests"}
SECTION = SandboxesSection(directory=Path("/nonexistent"))


def network(*allowlist: dict[str, Any]) -> Any:
    return parse({"network": {"allowlist": list(allowlist)}}, "env.yaml", ENV)


def decide(policy: Policy, host: str, port: int = 443, tls: bool | None = True) -> Decision:
    return policy.decide(canonical_host(host), port, tls=tls)


def computed(policy: Policy, host: str, port: int = 443, tls: bool | None = True) -> Decision:
    """What `decide` answers without remembering anything (a fresh snapshot's first ask)."""
    fresh = Policy(policy.config, policy._self_addresses, policy._is_local)
    return decide(fresh, host, port, tls)


TOKENED = {"domain": "api.example.com", "ports": [443], "transform": {"token_env": "TOKEN"}}
NODE = Policy(network(TOKENED, {"domain": "*.example.org"}, {"domain": "10.0.0.0/8"}))

# (id, host, port, tls, reason): each asked twice, in this order, of one snapshot.
ASKED = [
    ("allowed", "api.example.com", 443, True, Reason.ALLOWLISTED),
    ("another port of the same name", "api.example.com", 80, True, Reason.PORT_NOT_ALLOWED),
    (
        "plaintext to a credentialled name",
        "api.example.com",
        443,
        False,
        Reason.PLAINTEXT_CREDENTIALS,
    ),
    ("tls not known yet (CONNECT)", "api.example.com", 443, None, Reason.ALLOWLISTED),
    ("a wildcard's name", "a.example.org", 443, True, Reason.ALLOWLISTED),
    ("not allowlisted", "other.test", 443, True, Reason.NOT_ALLOWLISTED),
    ("loopback name", "localhost", 443, True, Reason.LOOPBACK),
]


@pytest.mark.parametrize(
    ("host", "port", "tls", "reason"), [a[1:] for a in ASKED], ids=[a[0] for a in ASKED]
)
def test_a_name_is_decided_once_and_answered_the_same(
    host: str, port: int, tls: bool | None, reason: Reason
) -> None:
    policy = Policy(NODE.config)
    first = decide(policy, host, port, tls)
    assert first.reason is reason
    assert first == computed(policy, host, port, tls)
    assert decide(policy, host, port, tls) is first  # remembered


def test_the_keys_keep_port_and_tls_apart() -> None:
    policy = Policy(NODE.config)
    for _, host, port, tls, reason in ASKED:
        assert decide(policy, host, port, tls).reason is reason
    for _, host, port, tls, reason in ASKED:  # asked again, all remembered, none mixed up
        assert decide(policy, host, port, tls).reason is reason
    assert len(policy._decided) == len(ASKED)


def test_an_ip_host_is_never_remembered() -> None:
    policy = Policy(NODE.config)
    assert decide(policy, "10.1.2.3").reason is Reason.ALLOWLISTED
    assert decide(policy, "127.0.0.1").reason is Reason.LOOPBACK
    assert policy._decided == {}


def test_the_remembered_decisions_are_bounded() -> None:
    policy = Policy(network({"domain": "*"}))
    for n in range(DECIDED_ENTRIES + 5):
        assert decide(policy, f"h{n}.example.net").allowed
    assert len(policy._decided) <= DECIDED_ENTRIES
    assert decide(policy, "h0.example.net") == computed(policy, "h0.example.net")


def test_a_reloaded_policy_decides_by_its_own_file() -> None:
    before = Policy(NODE.config)
    assert decide(before, "a.example.org").allowed
    after = Policy(network(TOKENED))  # the reload dropped the wildcard
    assert decide(after, "a.example.org").reason is Reason.NOT_ALLOWLISTED
    assert decide(before, "a.example.org").allowed  # a request already holding it: unchanged


def tenancy(node: Policy, *allowlist: dict[str, Any], changed: bool = True) -> Tenancy:
    sandboxes = {"alpha": Sandbox("alpha", network(*allowlist), sandbox_class="ci")}
    return Tenancy(SECTION, node).rebuilt(sandboxes, node, frozenset(sandboxes))


def test_a_sandbox_remembers_its_decision_bounded_by_its_node() -> None:
    node = Policy(NODE.config)
    policy = tenancy(node, {"domain": "*.example.org"}, {"domain": "b.example.net"}).policy("alpha")
    assert isinstance(policy, SandboxPolicy)
    for _ in range(2):  # the second answer is remembered, and still the node's ceiling
        assert decide(policy, "a.example.org").allowed
        assert decide(policy, "a.example.org").node == decide(node, "a.example.org")
        refused = decide(policy, "b.example.net")  # the node does not allowlist it
        assert (refused.allowed, refused.reason) == (False, Reason.NOT_ALLOWLISTED)
    assert decide(policy, "a.example.org") is decide(policy, "a.example.org")


def test_a_node_reload_gives_every_sandbox_a_new_policy_and_new_decisions() -> None:
    sandboxes = {
        "alpha": Sandbox("alpha", network({"domain": "*.example.org"}), sandbox_class="ci")
    }
    node = Policy(NODE.config)
    first = Tenancy(SECTION, node).rebuilt(sandboxes, node, frozenset(sandboxes))
    assert decide(first.policy("alpha"), "a.example.org").allowed
    reloaded = Policy(network(TOKENED))  # the node no longer allows *.example.org
    second = first.rebuilt(sandboxes, reloaded, frozenset())
    assert second.policy("alpha") is not first.policy("alpha")
    assert decide(second.policy("alpha"), "a.example.org").reason is Reason.NOT_ALLOWLISTED
    unchanged = second.rebuilt(sandboxes, reloaded, frozenset())  # same node, same file
    assert unchanged.policy("alpha") is second.policy("alpha")


def test_a_sandbox_file_reload_decides_by_the_new_file() -> None:
    node = Policy(NODE.config)
    before = tenancy(node, {"domain": "*.example.org"})
    assert decide(before.policy("alpha"), "a.example.org").allowed
    sandboxes = {
        "alpha": Sandbox("alpha", network({"domain": "b.example.org"}), sandbox_class="ci")
    }
    after = before.rebuilt(sandboxes, node, frozenset({"alpha"}))
    assert decide(after.policy("alpha"), "a.example.org").reason is Reason.NOT_ALLOWLISTED
