"""The proxy's own endpoints in every spelling, and this host's other addresses (D22)."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from sandbox_egress.proxy.addresses import match_candidates
from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import IPAddress, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.selfaddr import SelfAddressError, SelfAddresses, resolve_endpoint

ip = ipaddress.ip_address


def resolver(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> list[IPAddress]:
        if host not in answers:
            raise SelfAddressError(f"cannot resolve {host!r}")
        return [ip(a) for a in answers[host]]

    return resolve


OWN = SelfAddresses(
    [("198.51.100.7", 8080), ("proxy.internal", 9464)],
    resolve=resolver({"proxy.internal": ["203.0.113.9", "2001:db8::9"]}),
)


@pytest.mark.parametrize(
    ("destination", "expected"),
    [
        (("198.51.100.7", 8080), True),
        (("::ffff:198.51.100.7", 8080), True),  # IPv4-mapped
        (("::ffff:0:198.51.100.7", 8080), True),  # SIIT
        (("::198.51.100.7", 8080), True),  # IPv4-compatible
        (("64:ff9b::c633:6407", 8080), True),  # NAT64 of 198.51.100.7
        (("2002:c633:6407::1", 8080), True),  # 6to4 of 198.51.100.7
        (("198.51.100.7", 8081), False),
        (("198.51.100.8", 8080), False),
        (("203.0.113.9", 9464), True),  # a named endpoint, resolved at start
        (("::ffff:203.0.113.9", 9464), True),
        (("2001:db8::9", 9464), True),
        (("203.0.113.9", 8080), False),
    ],
)
def test_own_endpoints_in_every_spelling(destination: tuple[str, int], expected: bool) -> None:
    assert ((ip(destination[0]), destination[1]) in OWN) is expected


def test_wildcard_endpoint_matches_its_port_on_local_addresses_only() -> None:
    own = SelfAddresses([("0.0.0.0", 8080)])
    assert (ip("127.0.0.1"), 8080) in own
    assert (ip("::ffff:127.0.0.1"), 8080) in own
    assert (ip("127.0.0.1"), 8081) not in own
    assert (ip("192.0.2.1"), 8080) not in own  # TEST-NET-1: never an address of this host


def test_is_local_reads_the_embedded_ipv4() -> None:
    assert SelfAddresses().is_local(ip("127.0.0.1"))
    assert SelfAddresses().is_local(ip("::ffff:127.0.0.1"))
    assert not SelfAddresses().is_local(ip("192.0.2.1"))
    assert not SelfAddresses().is_local(ip("::ffff:192.0.2.1"))


def test_a_name_that_does_not_resolve_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # No real lookup of an unknown name: it would leave this host for the system resolver.
    def no_answer(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(SelfAddressError, match="proxy.example"):
        SelfAddresses([("proxy.example", 8080)], resolve=resolver({}))
    monkeypatch.setattr(socket, "getaddrinfo", no_answer)
    with pytest.raises(SelfAddressError, match="Name or service not known"):
        resolve_endpoint("proxy.example", 8080)


def test_resolve_endpoint_reads_the_hosts_file() -> None:
    assert ip("127.0.0.1") in resolve_endpoint("localhost", 80)  # /etc/hosts, no DNS


LOCAL = {ip("10.1.2.3"), ip("203.0.113.5")}


def local_policy(*allowlist: dict[str, object]) -> Policy:
    entries = [{"domain": "*.example"}, *allowlist]  # a name to pick addresses for
    config = parse({"network": {"allowlist": entries}}, "env.yaml", {})
    return Policy(config, frozenset(), lambda a: any(c in LOCAL for c in match_candidates(a)))


@pytest.mark.parametrize(
    ("allowlist", "address", "reason"),
    # The host's own addresses are `proxy_host`, not `loopback` (issue 48).
    [
        ([{"domain": "10.0.0.0/8"}], "10.1.2.3", Reason.PROXY_HOST),  # the host inside a CIDR
        ([{"domain": "10.0.0.0/8"}], "10.1.2.4", Reason.ALLOWLISTED),  # a neighbour
        ([{"domain": "10.1.2.3"}], "10.1.2.3", Reason.ALLOWLISTED),  # named exactly: opened
        ([{"domain": "10.1.2.3/32"}], "10.1.2.3", Reason.ALLOWLISTED),
        ([{"domain": "*"}], "203.0.113.5", Reason.PROXY_HOST),  # the host's own, before reserved
        ([{"domain": "203.0.113.0/24"}], "203.0.113.5", Reason.PROXY_HOST),
        ([{"domain": "10.0.0.0/8"}], "::ffff:10.1.2.3", Reason.PROXY_HOST),
        ([{"domain": "10.1.2.3"}], "::ffff:10.1.2.3", Reason.ALLOWLISTED),
    ],
)
def test_local_addresses_need_a_single_address_entry(
    allowlist: list[dict[str, object]], address: str, reason: Reason
) -> None:
    policy = local_policy(*allowlist)
    assert policy.decide(canonical_host(address), 443, tls=True).reason is reason
    decision, picked = policy.pick_address(
        policy.decide(canonical_host("n.example"), 443, tls=True), [ip(address)], 443
    )
    assert (picked == ip(address)) is (reason is Reason.ALLOWLISTED)
    if reason is Reason.LOOPBACK:
        assert decision.reason is Reason.LOOPBACK


def test_local_answers_are_kept_for_a_second_then_asked_again() -> None:
    asked: list[str] = []
    now = [100.0]

    def probe(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        asked.append(str(address))
        return str(address) == "198.18.0.9"

    own = SelfAddresses(probe=probe, clock=lambda: now[0])
    assert own.is_local(ip("198.18.0.9"))
    assert own.is_local(ip("::ffff:198.18.0.9"))
    assert not own.is_local(ip("203.0.113.1"))
    # The mapped spelling asks about itself once, and its IPv4 from the cache.
    assert asked == ["198.18.0.9", "::ffff:c612:9", "203.0.113.1"]
    assert own.is_local(ip("198.18.0.9"))
    assert not own.is_local(ip("203.0.113.1"))
    assert len(asked) == 3
    now[0] += 1.5
    assert own.is_local(ip("198.18.0.9"))
    assert asked[3:] == ["198.18.0.9"]
