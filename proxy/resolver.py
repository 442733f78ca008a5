"""Name resolution for the proxy: the system resolver, answers in its order.

Uses getaddrinfo, so /etc/hosts, nsswitch and resolv.conf apply exactly as for
any other program on the host (README.md#command-line). The caller checks every answer and
pins the one it connects to; nothing here is trusted beyond parsing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from proxy.hosts import IPAddress

Resolve = Callable[[str, int], Awaitable[list[IPAddress]]]


async def system_resolve(name: str, port: int) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
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
    pins the one it connects to. Failures are not cached.
    """

    def __init__(
        self,
        resolve: Resolve,
        max_age: float = 5.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._resolve = resolve
        self._max_age = max_age
        self._max_entries = max_entries
        self._clock = clock
        self._answers: OrderedDict[str, tuple[float, list[IPAddress]]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[list[IPAddress]]] = {}

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        cached = self._answers.get(name)
        if cached is not None and cached[0] > self._clock():
            self._answers.move_to_end(name)
            return cached[1]
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
            raise
        finally:
            del self._pending[name]
        future.set_result(addresses)
        self._answers[name] = (self._clock() + self._max_age, addresses)
        self._answers.move_to_end(name)
        while len(self._answers) > self._max_entries:
            self._answers.popitem(last=False)
        return addresses
