"""The resolver cache: lifetime, bound, coalescing, and no caching of failures."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from sandbox_egress.proxy.resolver import CachingResolver


class Upstream:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, name: str, port: int) -> list[ipaddress.IPv4Address]:
        self.calls.append(name)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return [ipaddress.IPv4Address(f"198.18.0.{len(self.calls)}")]


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_answers_are_reused_until_they_expire() -> None:
    upstream, clock = Upstream(), Clock()
    cache = CachingResolver(upstream, max_age=5.0, clock=clock)

    async def scenario() -> list[str]:
        first = await cache("a.example", 443)
        clock.now += 4.9
        second = await cache("a.example", 80)
        clock.now += 0.2
        third = await cache("a.example", 443)
        return [str(first[0]), str(second[0]), str(third[0])]

    assert asyncio.run(scenario()) == ["198.18.0.1", "198.18.0.1", "198.18.0.2"]
    assert upstream.calls == ["a.example", "a.example"]


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    upstream = Upstream()
    cache = CachingResolver(upstream, max_entries=2, clock=Clock())

    async def scenario() -> None:
        for name in ("a", "b", "a", "c", "a", "b"):
            await cache(name, 443)

    asyncio.run(scenario())
    assert upstream.calls == ["a", "b", "c", "b"]  # "b" was evicted by "c"; "a" stayed hot


def test_concurrent_lookups_of_one_name_share_one_query() -> None:
    upstream = Upstream()
    cache = CachingResolver(upstream, clock=Clock())

    async def scenario() -> set[str]:
        upstream.gate = asyncio.Event()
        waiting = [asyncio.create_task(cache("a.example", 443)) for _ in range(20)]
        await asyncio.sleep(0)
        upstream.gate.set()
        return {str(r[0]) for r in await asyncio.gather(*waiting)}

    assert asyncio.run(scenario()) == {"198.18.0.1"}
    assert upstream.calls == ["a.example"]


def test_failures_are_not_cached_and_reach_every_waiter() -> None:
    upstream = Upstream()
    upstream.fail = True
    cache = CachingResolver(upstream, clock=Clock())

    async def scenario() -> None:
        upstream.gate = asyncio.Event()
        waiting = [asyncio.create_task(cache("gone.example", 443)) for _ in range(3)]
        await asyncio.sleep(0)
        upstream.gate.set()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(r, socket.gaierror) for r in results)
        with pytest.raises(socket.gaierror):
            await cache("gone.example", 443)

    asyncio.run(scenario())
    assert upstream.calls == ["gone.example", "gone.example"]
