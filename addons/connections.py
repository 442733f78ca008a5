"""The connection bounds: one client cannot hold every connection the proxy can open.

`client_connected` takes a slot of the client's share (`proxy.fairness`, keyed by
`addons.shared.key_of`); past `--max-connections-per-client` or `--max-connections`
the connection is closed at once — mitmproxy closes a client whose `error` the hook
set, before reading a byte — and counted in `egress_bound_hits_total{outcome="refused"}`.
`client_disconnected` gives the slot back, once. A refusal is logged at most once per
`LOG_EVERY_S` per bound: a flood of refused connections is not a flood of log lines.
"""

from __future__ import annotations

import logging
import time

from mitmproxy import connection

from sandbox_egress.addons.shared import key_of
from sandbox_egress.proxy.fairness import Bound, ClientKey, FairShare, Slots
from sandbox_egress.proxy.metrics import ProxyMetrics

log = logging.getLogger("egress")

LOG_EVERY_S = 10.0


class Connections:
    def __init__(self, metrics: ProxyMetrics, share: FairShare) -> None:
        self.metrics = metrics
        self.slots = Slots(share, Bound.CONNECTIONS_CLIENT, Bound.CONNECTIONS_TOTAL)
        self._held: dict[str, ClientKey] = {}  # client connection id -> its key
        self._logged: dict[Bound, float] = {}

    def client_connected(self, client: connection.Client) -> None:
        key = key_of(client)
        bound = self.slots.try_acquire(key)
        if bound is None:
            self._held[client.id] = key
            return
        client.error = f"refused: {bound.value} connections reached"
        self.metrics.bound_hits.labels(bound.value, "refused").inc()
        now = time.monotonic()
        if now - self._logged.get(bound, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[bound] = now
            share = self.slots.share
            limit = share.per_client if bound is Bound.CONNECTIONS_CLIENT else share.total
            log.warning("refusing client connections: %s bound (%d) reached", bound.value, limit)

    def client_disconnected(self, client: connection.Client) -> None:
        key = self._held.pop(client.id, None)
        if key is not None:
            self.slots.release(key)
