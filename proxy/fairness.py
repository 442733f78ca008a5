"""Fair shares of what every client of the proxy uses: name lookups and connections.

A node-wide proxy serves many sandboxes, and one of them must not exhaust what the
others share (issue 21). Every bound here is held per *client key* and in
total, and each is an operator option with a documented default
(docs/configuration.md#fair-sharing):

* `ClientKey` / `client_key`: the one place a client is named. Today it is the client's
  address without its port; the many-sandboxes work keys the same bounds per sandbox by
  changing this function alone.
* `Slots`: at most `per_client` units held by one key and `total` by all keys. A waiter
  is served round-robin across keys, so a key with many waiters cannot starve a key with
  one; past `queue_per_client` waiters a key is refused at once (`Saturated`).
* `Bound`: the closed set of metric label values for a bound that bites.

Pure asyncio, no mitmproxy, no I/O.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NewType

ClientKey = NewType("ClientKey", str)

# Defaults of the options (docs/configuration.md#fair-sharing).
DNS_LOOKUPS = 32  # lookups in the system resolver at once, all clients (its own threads)
DNS_LOOKUPS_PER_CLIENT = 4  # ... of one client; more wait their turn
DNS_QUEUE_PER_CLIENT = 64  # lookups of one client waiting; more fail at once (dns_failure)
CONNECTIONS = 4096  # client connections open at once, all clients
CONNECTIONS_PER_CLIENT = 512  # ... of one client address
METRICS_CONNECTIONS = 32  # connections the metrics/health listener serves at once


class Bound(enum.StrEnum):
    """Which fair-share bound bit (`egress_bound_hits_total{bound,outcome}`)."""

    DNS_CLIENT = "dns_per_client"
    DNS_TOTAL = "dns_total"
    CONNECTIONS_CLIENT = "connections_per_client"
    CONNECTIONS_TOTAL = "connections_total"
    ACCEPT = "accept"  # the process ran out of descriptors: accepting paused
    METRICS_CONNECTIONS = "metrics_connections"


def client_key(host: str) -> ClientKey:
    """The key of a client's fair share: its address (an IPv4-mapped one as IPv4)."""
    return ClientKey(host.removeprefix("::ffff:") if "." in host else host)


@dataclass(frozen=True, slots=True)
class FairShare:
    """The bounds of one shared resource."""

    total: int
    per_client: int
    queue_per_client: int = 0


@dataclass(frozen=True, slots=True)
class Fairness:
    """Every fair-share bound of one proxy process (the options of `run` and `dns`)."""

    dns: FairShare = FairShare(DNS_LOOKUPS, DNS_LOOKUPS_PER_CLIENT, DNS_QUEUE_PER_CLIENT)
    connections: FairShare = FairShare(CONNECTIONS, CONNECTIONS_PER_CLIENT)
    metrics_connections: int = METRICS_CONNECTIONS


# Descriptors kept for everything but client connections (listeners, the resolver, logs).
RESERVED_DESCRIPTORS = 64


def within_descriptors(share: FairShare, limit: int) -> FairShare:
    """The connection share that fits a process limit of `limit` descriptors.

    Each client connection may need one upstream connection too, so at most half of
    what is not reserved; and one client at most half of that, so a client alone can
    never exhaust the others' share whatever the options say.
    """
    fits = max(2, (limit - RESERVED_DESCRIPTORS) // 2)
    total = min(share.total, fits)
    return FairShare(total, max(1, min(share.per_client, total // 2)), share.queue_per_client)


class Saturated(Exception):
    """A key already has its whole share in use and its whole queue waiting."""

    def __init__(self, bound: Bound) -> None:
        super().__init__(f"fair-share bound {bound.value} reached")
        self.bound = bound


class Slots:
    """Counted slots with a per-key bound, a total bound and a round-robin queue.

    `acquire(key)` returns when a slot is held (the caller must `release(key)` it once);
    cancelling a waiter gives up its place and never leaks a slot. `on_wait(bound)` is
    called whenever a key has to wait, with the bound that made it.
    """

    def __init__(
        self,
        share: FairShare,
        client_bound: Bound,
        total_bound: Bound,
        on_wait: Callable[[Bound], None] = lambda _bound: None,
    ) -> None:
        self.share = share
        self._client_bound, self._total_bound = client_bound, total_bound
        self._on_wait = on_wait
        self._held: Counter[ClientKey] = Counter()
        self._in_use = 0
        # Keys with waiters, in the order they are next served (round-robin).
        self._waiting: OrderedDict[ClientKey, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def in_use(self) -> int:
        return self._in_use

    def held(self, key: ClientKey) -> int:
        return self._held[key]

    def try_acquire(self, key: ClientKey) -> Bound | None:
        """Take a slot now if one is free for `key` (None), else name the bound in the way."""
        if self._held[key] >= self.share.per_client:
            return self._client_bound
        if self._in_use >= self.share.total or self._waiting:
            return self._total_bound
        self._take(key)
        return None

    async def acquire(self, key: ClientKey) -> None:
        bound = self._blocking(key)
        if bound is None:
            self._take(key)
            return
        queue = self._waiting.get(key)
        if queue is None:
            queue = self._waiting[key] = deque()
        if len(queue) >= self.share.queue_per_client:
            if not queue:
                del self._waiting[key]
            raise Saturated(self._client_bound)
        self._on_wait(bound)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(key)  # granted as it was cancelled: hand it on
            else:
                self._forget(key, waiter)
            raise

    def release(self, key: ClientKey) -> None:
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]
        self._in_use -= 1
        self._serve()

    def _blocking(self, key: ClientKey) -> Bound | None:
        if self._held[key] >= self.share.per_client or self._waiting.get(key):
            return self._client_bound
        if self._in_use >= self.share.total:
            return self._total_bound
        return None

    def _take(self, key: ClientKey) -> None:
        self._held[key] += 1
        self._in_use += 1

    def _serve(self) -> None:
        """Grant free slots to waiting keys, one each in turn."""
        for _ in range(len(self._waiting)):
            if self._in_use >= self.share.total or not self._waiting:
                return
            key, queue = self._waiting.popitem(last=False)
            while queue and queue[0].done():  # cancelled, not yet forgotten
                queue.popleft()
            if queue and self._held[key] < self.share.per_client:
                waiter = queue.popleft()
                self._take(key)
                waiter.set_result(None)
            if queue:
                self._waiting[key] = queue  # to the back of the turn

    def _forget(self, key: ClientKey, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(key)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[key]
