"""Name resolution for the proxy: the system resolver, answers in its order.

Uses getaddrinfo, so /etc/hosts, nsswitch and resolv.conf apply exactly as for
any other program on the host (README.md#command-line). The caller checks every answer and
pins the one it connects to; nothing here is trusted beyond parsing.
`MeasuredResolver` counts and times the lookups that reach the resolver (cache misses).
`FairResolver` shares the resolver's threads fairly between clients (`proxy.fairness`):
a lookup holds its client's slot until getaddrinfo returns, not until its caller gives up,
so a client whose names never answer ties up its own share only (issue 21).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from sandbox_egress.proxy.fairness import Bound, ClientKey, Saturated, Slots
from sandbox_egress.proxy.hosts import IPAddress

Resolve = Callable[[str, int], Awaitable[list[IPAddress]]]
KeyedResolve = Callable[[ClientKey, str, int], Awaitable[list[IPAddress]]]


async def system_resolve(name: str, port: int) -> list[IPAddress]:
    return await _resolve_in(None, name, port)


def threaded_resolve(threads: int) -> Resolve:
    """The system resolver on `threads` threads of its own (not the loop's shared pool)."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="resolver")

    async def resolve(name: str, port: int) -> list[IPAddress]:
        return await _resolve_in(executor, name, port)

    return resolve


async def _resolve_in(executor: ThreadPoolExecutor | None, name: str, port: int) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    infos = await loop.run_in_executor(
        executor, lambda: socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    )
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canonical, sockaddr in infos:
        # A link-local IPv6 answer carries a scope id ("fe80::1%eth0"); the address decides.
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]), None)
    return list(seen)


class CachingResolver:
    """A bounded cache in front of a resolver; concurrent lookups of a name share one query.

    getaddrinfo does not expose record TTLs, so answers are kept for a short fixed
    lifetime (`max_age`), shorter than the TTL of nearly every real record. The cache
    changes nothing about safety: every request still checks each cached address and
    pins the one it connects to. A failure (no such name, no answer) is kept for
    `negative_age`, so a name whose server never answers ties up the resolver once per
    that time, not once per request (issue 21); 0 keeps none.
    """

    def __init__(
        self,
        resolve: Resolve,
        max_age: float = 5.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        negative_age: float = 0.0,
    ) -> None:
        self._resolve = resolve
        self._max_age = max_age
        self._negative_age = negative_age
        self._max_entries = max_entries
        self._clock = clock
        # name -> (valid until, the answer or the failure's (errno, message))
        self._answers: OrderedDict[str, tuple[float, list[IPAddress] | tuple[int, str]]] = (
            OrderedDict()
        )
        self._pending: dict[str, asyncio.Future[list[IPAddress]]] = {}

    def cached(self, name: str) -> list[IPAddress] | None:
        """A fresh cached answer, or None; a fresh cached failure raises it again."""
        cached = self._answers.get(name)
        if cached is None or cached[0] <= self._clock():
            return None
        self._answers.move_to_end(name)
        if isinstance(cached[1], tuple):
            raise socket.gaierror(*cached[1])
        return cached[1]

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        cached = self.cached(name)
        if cached is not None:
            return cached
        pending = self._pending.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[list[IPAddress]] = asyncio.get_running_loop().create_future()
        self._pending[name] = future
        try:
            addresses = await self._resolve(name, port)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            if isinstance(exc, OSError) and self._negative_age > 0:
                failure = (exc.errno or socket.EAI_FAIL, exc.strerror or "lookup failed")
                self._keep(name, self._negative_age, failure)
            raise
        finally:
            del self._pending[name]
        future.set_result(addresses)
        self._keep(name, self._max_age, addresses)
        return addresses

    def _keep(self, name: str, age: float, answer: list[IPAddress] | tuple[int, str]) -> None:
        self._answers[name] = (self._clock() + age, answer)
        self._answers.move_to_end(name)
        while len(self._answers) > self._max_entries:
            self._answers.popitem(last=False)


class MeasuredResolver:
    """Times and counts every lookup of the resolver it wraps, then passes the answer on.

    `observe(result, seconds)` is called once per lookup, with `result` one of "ok",
    "failed" (the resolver raised OSError: no such name, no server, SERVFAIL) or
    "timeout" (the caller gave up: cancelled or timed out). The name is never passed on:
    host names are chosen by the sandbox and would make an unbounded label.
    """

    def __init__(
        self,
        resolve: Resolve,
        observe: Callable[[str, float], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolve = resolve
        self._observe = observe
        self._clock = clock

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        started = self._clock()
        result = "failed"
        try:
            addresses = await self._resolve(name, port)
            result = "ok"
            return addresses
        except (asyncio.CancelledError, TimeoutError):
            result = "timeout"
            raise
        finally:
            self._observe(result, self._clock() - started)


class FairResolver:
    """Lookups of each client key within `slots`; a cache hit needs no slot.

    A lookup's slot is released when the resolver returns, even if its caller gave up
    (the lookup runs on, shielded, and its failure is then cached): a thread stuck in
    getaddrinfo is counted against the client that asked for it. A client over its
    queue bound fails at once, as a failed lookup (`dns_failure`).
    """

    def __init__(
        self,
        resolve: Resolve,
        slots: Slots,
        cache: CachingResolver | None = None,
        on_refused: Callable[[Bound], None] = lambda _bound: None,
    ) -> None:
        self._resolve = resolve
        self._slots = slots
        self._cache = cache
        self._on_refused = on_refused
        self._running: set[asyncio.Future[list[IPAddress]]] = set()  # owned until they end

    async def __call__(self, key: ClientKey, name: str, port: int) -> list[IPAddress]:
        if self._cache is not None and (cached := self._cache.cached(name)) is not None:
            return cached
        try:
            await self._slots.acquire(key)
        except Saturated as exc:
            self._on_refused(exc.bound)
            raise socket.gaierror(socket.EAI_AGAIN, "too many lookups of this client") from exc
        task: asyncio.Future[list[IPAddress]] = asyncio.ensure_future(self._resolve(name, port))
        self._running.add(task)

        def done(finished: asyncio.Future[list[IPAddress]]) -> None:
            self._running.discard(finished)
            self._slots.release(key)
            if not finished.cancelled():
                finished.exception()  # retrieved: the caller may have left

        task.add_done_callback(done)
        return await asyncio.shield(task)

    def for_client(self, key: ClientKey) -> Resolve:
        """This resolver as the stages call it: one client's lookups."""

        async def resolve(name: str, port: int) -> list[IPAddress]:
            return await self(key, name, port)

        return resolve

    async def aclose(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
