"""Fair shares (proxy.fairness) and the fair resolver (proxy.resolver.FairResolver):
one client's stuck lookups never hold another client's turn (issue 21)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from sandbox_egress.proxy.fairness import (
    Bound,
    ClientKey,
    Fairness,
    FairShare,
    Saturated,
    Slots,
    client_key,
    within_descriptors,
)
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.resolver import CachingResolver, FairResolver

A, B, C = ClientKey("198.19.0.1"), ClientKey("198.19.0.2"), ClientKey("198.19.0.3")


def slots(total: int, per_client: int, queue: int = 8, waits: list[Bound] | None = None) -> Slots:
    seen = waits if waits is not None else []
    return Slots(
        FairShare(total, per_client, queue), Bound.DNS_CLIENT, Bound.DNS_TOTAL, seen.append
    )


KEYS = [
    ("ipv4", "198.19.0.1", "198.19.0.1"),
    ("mapped-ipv4", "::ffff:198.19.0.1", "198.19.0.1"),
    ("ipv6", "2001:db8::1", "2001:db8::1"),
]


@pytest.mark.parametrize(("host", "key"), [c[1:] for c in KEYS], ids=[c[0] for c in KEYS])
def test_a_client_is_keyed_by_its_address(host: str, key: str) -> None:
    assert client_key(host) == key


def test_one_client_waits_for_its_own_share_another_does_not() -> None:
    waits: list[Bound] = []
    shares = slots(total=8, per_client=2, waits=waits)

    async def scenario() -> list[str]:
        order: list[str] = []
        await shares.acquire(A)
        await shares.acquire(A)
        third = asyncio.create_task(shares.acquire(A))
        await asyncio.sleep(0)
        order.append(f"A third waiting: {not third.done()}")
        await shares.acquire(B)  # B is not behind A
        order.append(f"B held {shares.held(B)}")
        shares.release(A)
        await third
        order.append(f"A held {shares.held(A)}, in use {shares.in_use}")
        return order

    assert asyncio.run(scenario()) == ["A third waiting: True", "B held 1", "A held 2, in use 3"]
    assert waits == [Bound.DNS_CLIENT]


def test_the_total_is_served_round_robin_across_clients() -> None:
    shares = slots(total=2, per_client=2)

    async def scenario() -> list[ClientKey]:
        served: list[ClientKey] = []
        await shares.acquire(A)
        await shares.acquire(A)

        async def take(key: ClientKey) -> None:
            await shares.acquire(key)
            served.append(key)

        waiting = [asyncio.create_task(take(k)) for k in (A, A, A, B, C)]
        await asyncio.sleep(0)
        for _ in range(5):
            shares.release(served[-1] if served else A)
            await asyncio.sleep(0)
        await asyncio.gather(*waiting)
        return served

    # A had three waiters first, yet B and C are each served before A's second one.
    assert asyncio.run(scenario()) == [A, B, C, A, A]


def test_past_its_queue_a_client_is_refused_at_once() -> None:
    shares = slots(total=4, per_client=1, queue=2)

    async def scenario() -> Bound:
        await shares.acquire(A)
        queued = [asyncio.create_task(shares.acquire(A)) for _ in range(2)]
        await asyncio.sleep(0)
        try:
            with pytest.raises(Saturated) as refused:
                await shares.acquire(A)
            await shares.acquire(B)
        finally:
            for task in queued:
                task.cancel()
        return refused.value.bound

    assert asyncio.run(scenario()) is Bound.DNS_CLIENT


def test_a_cancelled_waiter_leaks_no_slot() -> None:
    shares = slots(total=1, per_client=1)

    async def scenario() -> tuple[int, int]:
        await shares.acquire(A)
        gone = asyncio.create_task(shares.acquire(B))
        later = asyncio.create_task(shares.acquire(C))
        await asyncio.sleep(0)
        gone.cancel()
        shares.release(A)  # offered to B, which left: C gets it
        await later
        return shares.in_use, shares.held(C)

    assert asyncio.run(scenario()) == (1, 1)


def test_connections_take_a_slot_or_name_the_bound() -> None:
    shares = Slots(FairShare(3, 2), Bound.CONNECTIONS_CLIENT, Bound.CONNECTIONS_TOTAL)
    outcomes = [shares.try_acquire(k) for k in (A, A, A, B, C)]
    assert outcomes == [None, None, Bound.CONNECTIONS_CLIENT, None, Bound.CONNECTIONS_TOTAL]


class Stuck:
    """A system resolver whose names under `.stuck.test` answer only when released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked: list[str] = []

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        self.asked.append(name)
        if name.endswith(".stuck.test"):
            await self.release.wait()
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return [ipaddress.ip_address("198.18.1.2")]


def test_a_client_with_stuck_lookups_does_not_delay_another() -> None:
    async def scenario() -> tuple[list[str], str, list[str]]:
        stuck = Stuck()
        cache = CachingResolver(stuck, negative_age=5.0)
        refused: list[Bound] = []
        fair = FairResolver(cache, slots(total=4, per_client=2, queue=4), cache, refused.append)
        attacker = fair.for_client(A)
        # Each caller gives up after a moment, as the proxy's stages do; the lookups go on.
        calls = [attacker(f"n{i}.stuck.test", 443) for i in range(8)]
        results = await asyncio.gather(
            *(asyncio.wait_for(c, 0.01) for c in calls), return_exceptions=True
        )
        outcomes = sorted({type(r).__name__ for r in results})
        answer = await fair.for_client(B)("hosts.test", 443)
        stuck.release.set()
        await fair.aclose()
        return outcomes, str(answer[0]), [b.value for b in refused]

    outcomes, answer, refused = asyncio.run(scenario())
    # Two lookups ran, four waited in A's queue, the last two were refused at once.
    assert outcomes == ["TimeoutError", "gaierror"]
    assert answer == "198.18.1.2"
    assert refused == ["dns_per_client", "dns_per_client"]


def test_the_slot_is_held_until_the_resolver_returns_not_until_the_caller_leaves() -> None:
    async def scenario() -> tuple[int, int, list[str]]:
        stuck = Stuck()
        shares = slots(total=4, per_client=1)
        fair = FairResolver(stuck, shares)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fair(A, "one.stuck.test", 443), 0.01)
        held_after_timeout = shares.held(A)
        stuck.release.set()
        await fair.aclose()
        await asyncio.sleep(0)
        return held_after_timeout, shares.held(A), stuck.asked

    assert asyncio.run(scenario()) == (1, 0, ["one.stuck.test"])


def test_a_failed_name_is_kept_for_the_negative_age() -> None:
    async def scenario() -> tuple[list[str], int]:
        stuck = Stuck()
        stuck.release.set()
        cache = CachingResolver(stuck, negative_age=5.0)
        fair = FairResolver(cache, slots(total=4, per_client=1), cache)
        failures = 0
        for _ in range(3):
            try:
                await fair(A, "gone.stuck.test", 443)
            except socket.gaierror:
                failures += 1
        return stuck.asked, failures

    assert asyncio.run(scenario()) == (["gone.stuck.test"], 3)


def test_the_dns_responder_answers_another_client_while_one_client_is_stuck() -> None:
    import dns.message
    import dns.rcode

    from sandbox_egress.proxy.config.loader import parse
    from sandbox_egress.proxy.dns import DnsMetrics, Responder
    from sandbox_egress.proxy.policy import Policy

    config = parse({"network": {"allowlist": [{"domain": "*"}]}}, "env.yaml", {})

    async def scenario() -> tuple[int, list[str]]:
        stuck = Stuck()
        metrics = DnsMetrics()
        fair = FairResolver(stuck, slots(total=4, per_client=2, queue=64))
        responder = Responder(Policy(config), fair, metrics)
        wires = [dns.message.make_query(f"n{i}.stuck.test", "A").to_wire() for i in range(20)]
        attack = [asyncio.create_task(responder.answer(w, A)) for w in wires]
        await asyncio.sleep(0)
        wire = await responder.answer(dns.message.make_query("hosts.test", "A").to_wire(), B)
        stuck.release.set()
        await asyncio.gather(*attack)
        await fair.aclose()
        assert wire is not None
        answer = dns.message.from_wire(wire)
        return answer.rcode(), [str(r) for rrset in answer.answer for r in rrset]

    assert asyncio.run(scenario()) == (dns.rcode.NOERROR, ["198.18.1.2"])


DESCRIPTORS = [
    # (name, options (total, per client), RLIMIT_NOFILE, expected (total, per client))
    ("large-limit-keeps-the-options", (4096, 512), 1 << 20, (4096, 512)),
    ("issue-21-256-descriptors", (4096, 512), 256, (96, 48)),
    ("per-client-never-over-half", (100, 100), 1 << 20, (100, 50)),
    ("tiny-limit-still-serves", (4096, 512), 10, (2, 1)),
]


@pytest.mark.parametrize(
    ("options", "limit", "expected"),
    [c[1:] for c in DESCRIPTORS],
    ids=[c[0] for c in DESCRIPTORS],
)
def test_the_connection_share_fits_the_descriptor_limit(
    options: tuple[int, int], limit: int, expected: tuple[int, int]
) -> None:
    share = within_descriptors(FairShare(*options), limit)
    assert (share.total, share.per_client) == expected


def test_the_bounds_are_options_with_their_documented_defaults() -> None:
    from sandbox_egress.runtime.cli import fairness_of
    from sandbox_egress.runtime.cmdline import parser

    run = parser().parse_args(["run", "--config", "env.yaml"])
    assert fairness_of(run) == Fairness()
    assert Fairness() == Fairness(
        dns=FairShare(32, 4, 64), connections=FairShare(4096, 512), metrics_connections=32
    )
    narrow = ["--dns-lookups", "8", "--dns-lookups-per-client", "2"]
    narrow += ["--max-connections", "100", "--max-connections-per-client", "10"]
    narrow += ["--metrics-connections", "4"]
    given = fairness_of(parser().parse_args(["run", "--config", "env.yaml", *narrow]))
    assert given == Fairness(FairShare(8, 2, 64), FairShare(100, 10), 4)
    dns = fairness_of(parser().parse_args(["dns", "--config", "env.yaml", "--dns-lookups", "3"]))
    assert dns.dns.total == 3 and dns.connections == Fairness().connections
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--config", "env.yaml", "--dns-lookups", "0"])
