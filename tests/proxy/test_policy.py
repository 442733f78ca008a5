"""The policy's decisions: which entry decides, and why a destination is refused."""

from __future__ import annotations

import ipaddress

import pytest

from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import canonical_host
from sandbox_egress.proxy.policy import Policy

ENV = {"TOKEN": "secret-value"}


def policy_of(*allowlist: dict[str, object]) -> Policy:
    return Policy(parse({"network": {"allowlist": list(allowlist)}}, "env.yaml", ENV))


def decide(policy: Policy, host: str, port: int = 443, tls: bool | None = True) -> Decision:
    return policy.decide(canonical_host(host), port, tls=tls)


NAMED = policy_of(
    {"domain": "example.com"},
    {"domain": "*.example.com"},
    {"domain": "*.deep.example.com", "ports": [8443]},
    {"domain": "api.example.com", "transform": {"Authorization": "Bearer ${TOKEN}"}},
    {"domain": "bücher.example"},
    {"domain": "metadata.google.internal"},
)

MATCHING = [
    # (id, host, expected reason, expected deciding pattern)
    ("apex-exact", "example.com", Reason.ALLOWLISTED, "example.com"),
    ("one-label", "a.example.com", Reason.ALLOWLISTED, "*.example.com"),
    ("two-labels", "a.b.example.com", Reason.ALLOWLISTED, "*.example.com"),
    ("exact-beats-wildcard", "api.example.com", Reason.ALLOWLISTED, "api.example.com"),
    ("exact-does-not-cover-sub", "x.api.example.com", Reason.ALLOWLISTED, "*.example.com"),
    ("longest-wildcard", "x.deep.example.com", Reason.PORT_NOT_ALLOWED, "*.deep.example.com"),
    ("case", "API.EXAMPLE.COM", Reason.ALLOWLISTED, "api.example.com"),
    ("trailing-dot", "example.com.", Reason.ALLOWLISTED, "example.com"),
    ("idn-unicode", "BÜCHER.example", Reason.ALLOWLISTED, "xn--bcher-kva.example"),
    ("idn-punycode", "xn--bcher-kva.example", Reason.ALLOWLISTED, "xn--bcher-kva.example"),
    ("lookalike-suffix", "example.com.evil.net", Reason.NOT_ALLOWLISTED, None),
    ("lookalike-prefix", "evilexample.com", Reason.NOT_ALLOWLISTED, None),
    ("lookalike-dash", "evil-example.com", Reason.NOT_ALLOWLISTED, None),
    ("other-tld", "example.org", Reason.NOT_ALLOWLISTED, None),
    ("localhost", "localhost", Reason.LOOPBACK, None),
    ("localhost-sub", "a.localhost", Reason.LOOPBACK, None),
    ("localhost-localdomain", "localhost.localdomain", Reason.LOOPBACK, None),
    (
        "metadata-name-explicit",
        "metadata.google.internal",
        Reason.ALLOWLISTED,
        "metadata.google.internal",
    ),
]


@pytest.mark.parametrize(
    ("host", "reason", "pattern"), [c[1:] for c in MATCHING], ids=[c[0] for c in MATCHING]
)
def test_most_specific_entry_decides(host: str, reason: Reason, pattern: str | None) -> None:
    decision = decide(NAMED, host)
    assert (decision.reason, decision.entry.pattern if decision.entry else None) == (
        reason,
        pattern,
    )
    assert decision.allowed is (reason is Reason.ALLOWLISTED)


STAR = policy_of(
    {"domain": "*"}, {"domain": "198.18.1.0/24", "ports": [80, 443]}, {"domain": "2001:db8::/32"}
)

ADDRESSES = [
    ("public-name", "anything.example", 443, Reason.ALLOWLISTED, "*"),
    ("public-ip", "8.8.8.8", 443, Reason.ALLOWLISTED, "*"),
    ("public-ip-decimal", "134744072", 443, Reason.ALLOWLISTED, "*"),
    ("loopback-dotted", "127.0.0.1", 443, Reason.LOOPBACK, None),
    ("loopback-decimal", "2130706433", 443, Reason.LOOPBACK, None),
    ("loopback-hex", "0x7f000001", 443, Reason.LOOPBACK, None),
    ("loopback-octal", "0177.0.0.1", 443, Reason.LOOPBACK, None),
    ("loopback-short", "127.1", 443, Reason.LOOPBACK, None),
    ("loopback-v6", "::1", 443, Reason.LOOPBACK, None),
    ("loopback-mapped", "::ffff:127.0.0.1", 443, Reason.LOOPBACK, None),
    ("loopback-nat64", "64:ff9b::7f00:1", 443, Reason.LOOPBACK, None),
    ("unspecified", "0.0.0.0", 443, Reason.LOOPBACK, None),
    ("unspecified-v6", "::", 443, Reason.LOOPBACK, None),
    ("private-not-opened-by-star", "10.0.0.1", 443, Reason.INTERNAL_ADDRESS, None),
    ("cgnat", "100.64.0.1", 443, Reason.INTERNAL_ADDRESS, None),
    ("metadata", "169.254.169.254", 80, Reason.INTERNAL_ADDRESS, None),
    ("metadata-alibaba", "100.100.100.200", 80, Reason.INTERNAL_ADDRESS, None),
    ("metadata-azure", "168.63.129.16", 80, Reason.INTERNAL_ADDRESS, None),
    ("metadata-name-via-star", "metadata.google.internal", 80, Reason.INTERNAL_ADDRESS, "*"),
    ("multicast", "224.0.0.1", 443, Reason.INTERNAL_ADDRESS, None),
    ("broadcast", "255.255.255.255", 443, Reason.INTERNAL_ADDRESS, None),
    ("reserved-outside-cidr", "198.18.2.1", 443, Reason.INTERNAL_ADDRESS, None),
    ("opened-by-cidr", "198.18.1.2", 443, Reason.ALLOWLISTED, "198.18.1.0/24"),
    ("cidr-ports", "198.18.1.2", 22, Reason.PORT_NOT_ALLOWED, "198.18.1.0/24"),
    ("cidr-via-mapped", "::ffff:198.18.1.2", 80, Reason.ALLOWLISTED, "198.18.1.0/24"),
    ("v6-cidr", "2001:db8::5", 443, Reason.ALLOWLISTED, "2001:db8::/32"),
    ("cidr-via-nat64", "64:ff9b::c612:102", 80, Reason.ALLOWLISTED, "198.18.1.0/24"),
    # Teredo 2001:0:<server>:...:<client xor ffffffff>: server 198.18.1.2 opened, client 10.0.0.1 is not.
    ("teredo-client-not-opened", "2001:0:c612:102::f5ff:fffe", 443, Reason.INTERNAL_ADDRESS, None),
]


@pytest.mark.parametrize(
    ("host", "port", "reason", "pattern"), [c[1:] for c in ADDRESSES], ids=[c[0] for c in ADDRESSES]
)
def test_address_destinations(host: str, port: int, reason: Reason, pattern: str | None) -> None:
    decision = decide(STAR, host, port)
    assert (decision.reason, decision.entry.pattern if decision.entry else None) == (
        reason,
        pattern,
    )


def test_empty_allowlist_denies_everything() -> None:
    empty = policy_of()
    assert decide(empty, "example.com").reason is Reason.NOT_ALLOWLISTED
    assert decide(empty, "8.8.8.8").reason is Reason.NOT_ALLOWLISTED
    assert decide(empty, "10.0.0.1").reason is Reason.INTERNAL_ADDRESS


def test_ports_and_plaintext() -> None:
    policy = policy_of(
        {"domain": "a.example", "ports": [443], "transform": {"X-K": "${TOKEN}"}},
        {"domain": "b.example", "transform": {"X-K": "${TOKEN}"}, "allow_plaintext": True},
        {"domain": "c.example"},
    )
    assert decide(policy, "a.example", 80, tls=False).reason is Reason.PORT_NOT_ALLOWED
    assert decide(policy, "a.example", 443, tls=False).reason is Reason.PLAINTEXT_CREDENTIALS
    assert decide(policy, "a.example", 443, tls=True).allowed
    assert decide(policy, "a.example", 443, tls=None).allowed  # CONNECT: scheme not known yet
    assert decide(policy, "b.example", 80, tls=False).allowed
    assert decide(policy, "c.example", 80, tls=False).allowed


def ips(*texts: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address(t) for t in texts]


PICKS = [
    # (id, resolver answers, port, pinned address, reason)
    ("first-public", ["93.184.216.34", "93.184.216.35"], 443, "93.184.216.34", Reason.ALLOWLISTED),
    (
        "rebinding-public-then-loopback",
        ["93.184.216.34", "127.0.0.1"],
        443,
        "93.184.216.34",
        Reason.ALLOWLISTED,
    ),
    (
        "loopback-first-skipped",
        ["127.0.0.1", "93.184.216.34"],
        443,
        "93.184.216.34",
        Reason.ALLOWLISTED,
    ),
    ("only-loopback", ["127.0.0.1", "::1"], 443, None, Reason.LOOPBACK),
    ("only-private", ["10.1.2.3"], 443, None, Reason.INTERNAL_ADDRESS),
    ("private-and-loopback", ["10.1.2.3", "127.0.0.1"], 443, None, Reason.LOOPBACK),
    ("opened-range", ["198.18.1.2"], 443, "198.18.1.2", Reason.ALLOWLISTED),
    ("opened-range-port-not-in-opener", ["198.18.1.2"], 8443, None, Reason.INTERNAL_ADDRESS),
    ("nat64-loopback", ["64:ff9b::7f00:1"], 443, None, Reason.LOOPBACK),
    ("nothing-resolved", [], 443, None, Reason.DNS_FAILURE),
]


@pytest.mark.parametrize(
    ("answers", "port", "pinned", "reason"), [c[1:] for c in PICKS], ids=[c[0] for c in PICKS]
)
def test_pick_address_uses_only_checked_answers(
    answers: list[str], port: int, pinned: str | None, reason: Reason
) -> None:
    policy = policy_of({"domain": "*"}, {"domain": "198.18.1.0/24", "ports": [443]})
    allowed = decide(policy, "name.example", port)
    decision, address = policy.pick_address(allowed, ips(*answers), port)
    assert decision.reason is reason
    assert address == (ipaddress.ip_address(pinned) if pinned else None)
    assert decision.entry is not None
    assert decision.entry.pattern == "*"


def test_pick_address_keeps_a_refusal() -> None:
    refused = Decision.deny(Reason.NOT_ALLOWLISTED)
    assert STAR.pick_address(refused, ips("93.184.216.34"), 443) == (refused, None)


def test_proxy_own_addresses_are_refused() -> None:
    own = ipaddress.ip_address("198.18.1.2")
    policy = Policy(
        parse({"network": {"allowlist": [{"domain": "198.18.1.0/24"}, {"domain": "*"}]}}, "e", ENV),
        self_addresses=[(own, 8080)],
    )
    # Issue 48: the proxy's own address is not loopback: its reason says what it is.
    assert policy.decide(canonical_host("198.18.1.2"), 8080, tls=False).reason is Reason.PROXY_HOST
    assert policy.decide(canonical_host("198.18.1.2"), 80, tls=False).allowed
    allowed = policy.decide(canonical_host("name.example"), 8080, tls=True)
    assert policy.pick_address(allowed, [own], 8080)[0].reason is Reason.PROXY_HOST
    loopback_too = [own, ipaddress.ip_address("127.0.0.1")]  # loopback is said first
    assert policy.pick_address(allowed, loopback_too, 8080)[0].reason is Reason.LOOPBACK


def test_lookup_does_not_scan_the_allowlist() -> None:
    """10,000 entries: the index answers from dicts; a linear scan would visit each entry."""
    many = [{"domain": f"host{i}.example.com"} for i in range(5000)]
    many += [{"domain": f"*.zone{i}.example.net"} for i in range(4999)]
    many += [{"domain": f"10.{i // 256}.{i % 256}.0/24"} for i in range(1)]
    policy = policy_of(*many)
    assert decide(policy, "host4999.example.com").entry.pattern == "host4999.example.com"  # type: ignore[union-attr]
    assert decide(policy, "a.b.zone4998.example.net").entry.pattern == "*.zone4998.example.net"  # type: ignore[union-attr]
    assert decide(policy, "zone4998.example.net").reason is Reason.NOT_ALLOWLISTED
    assert len(policy._lengths[4]) == 1  # one prefix length probed, whatever the entry count


def _bindable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Linux lets a socket bind 255.255.255.255 and multicast groups: the kernel's
    `is_local` answer for them is yes, though they are no address of the host (issue 21)."""
    return str(ip) in {"255.255.255.255", "224.0.0.1", "198.18.1.2"}


KERNEL_BINDABLE = [
    ("broadcast-literal", "255.255.255.255", Reason.INTERNAL_ADDRESS),
    ("broadcast-mapped", "::ffff:255.255.255.255", Reason.INTERNAL_ADDRESS),
    ("multicast-literal", "224.0.0.1", Reason.INTERNAL_ADDRESS),
    ("own-host-address", "198.18.1.2", Reason.PROXY_HOST),
]


@pytest.mark.parametrize(
    ("host", "reason"), [c[1:] for c in KERNEL_BINDABLE], ids=[c[0] for c in KERNEL_BINDABLE]
)
def test_bindable_broadcast_is_internal_not_loopback(host: str, reason: Reason) -> None:
    policy = Policy(parse({"network": {"allowlist": [{"domain": "*"}]}}, "e", ENV), (), _bindable)
    assert decide(policy, host, 80).reason is reason
    allowed = decide(policy, "name.example", 80)
    assert policy.pick_address(allowed, [ipaddress.ip_address(host)], 80)[0].reason is reason
