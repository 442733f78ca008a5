"""Report-only rollout (issue 14): refusals of allowlist membership, ports and plaintext
come back `would_deny` and are let through; nothing else is ever relaxed."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy

ENTRIES: list[dict[str, Any]] = [
    {"domain": "api.example.com", "transform": {"Authorization": "Bearer ${T}"}},
    {"domain": "ports.example.com", "ports": [443]},
    {"domain": "trial.example.com", "ports": [443], "report_only": True},
    {"domain": "internal.example.com"},
]


def policy(report_only: bool) -> Policy:
    network: dict[str, Any] = {"allowlist": ENTRIES}
    if report_only:
        network["report_only"] = True
    return Policy(parse({"network": network}, "env.yaml", {"T": "t0ken-value"}))


def decide(p: Policy, host: str, port: int = 443, tls: bool | None = True) -> Decision:
    return p.decide(canonical_host(host), port, tls=tls)


GLOBAL = [  # host, port, tls, (verdict, reason) with network.report_only: true
    ("notlisted.example", 443, True, ("would_deny", Reason.NOT_ALLOWLISTED)),
    ("ports.example.com", 8443, True, ("would_deny", Reason.PORT_NOT_ALLOWED)),
    ("api.example.com", 80, False, ("would_deny", Reason.PLAINTEXT_CREDENTIALS)),
    ("api.example.com", 443, True, ("allow", Reason.ALLOWLISTED)),
    ("localhost", 443, True, ("deny", Reason.LOOPBACK)),
    ("127.0.0.1", 443, True, ("deny", Reason.LOOPBACK)),
    ("169.254.169.254", 80, False, ("deny", Reason.INTERNAL_ADDRESS)),
    ("10.1.2.3", 443, True, ("deny", Reason.INTERNAL_ADDRESS)),
]


@pytest.mark.parametrize(("host", "port", "tls", "expected"), GLOBAL)
def test_global_report_only(host: str, port: int, tls: bool, expected: tuple[str, Reason]) -> None:
    decision = decide(policy(True), host, port, tls)
    assert (decision.verdict, decision.reason) == expected
    assert decision.allowed is (expected[0] != "deny")
    assert decision.injects is (expected[0] == "allow")


def test_enforcing_by_default_and_per_entry() -> None:
    enforcing = policy(False)
    assert decide(enforcing, "notlisted.example").verdict == "deny"
    assert decide(enforcing, "ports.example.com", 8443).verdict == "deny"
    trial = decide(enforcing, "trial.example.com", 8443)  # only this entry reports
    assert (trial.verdict, trial.reason, trial.allowed) == (
        "would_deny",
        Reason.PORT_NOT_ALLOWED,
        True,
    )
    assert trial.entry is not None
    assert trial.entry.pattern == "trial.example.com"


def test_the_address_stage_still_refuses_internal_answers() -> None:
    p = policy(True)
    passed = decide(p, "notlisted.example")
    internal = [ipaddress.ip_address("10.0.0.5")]
    public = [ipaddress.ip_address("93.184.216.34")]
    assert p.pick_address(passed, internal, 443)[0].reason is Reason.INTERNAL_ADDRESS
    assert p.pick_address(passed, internal, 443)[0].allowed is False
    kept, address = p.pick_address(passed, public, 443)
    assert (kept.verdict, str(address)) == ("would_deny", "93.184.216.34")


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ({"report_only": "yes", "allowlist": []}, "network.report_only: must be true or false"),
        ({"allowlist": [{"domain": "a.test", "report_only": 1}]},
         "network.allowlist[0].report_only: must be true or false"),
    ],
)  # fmt: skip
def test_report_only_must_be_a_boolean(network: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse({"network": network}, "env.yaml", {})
    assert [str(p) for p in refused.value.problems] == [f"env.yaml: {message}"]


def test_only_reportable_refusals_can_be_let_through() -> None:
    with pytest.raises(ValueError):
        Decision.would_deny(Decision.deny(Reason.LOOPBACK))
