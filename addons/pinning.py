"""Pinning: an upstream connection opens only to an address the policy checked.

The policy addon records, per client connection, which checked address each
destination (host as mitmproxy will connect to it, port) must use. When
mitmproxy is about to connect, `server_connect` swaps the destination for its
pinned address — so the name is never resolved a second time, and a rebinding
DNS server has nothing to answer — or refuses the connection when nothing was
pinned (fail closed: no decision, no connection).

Once connected, the host name is put back on the connection: mitmproxy matches
later requests to open connections by that name, so a kept-alive connection is
reused for its own host and never for another one.

`server_connect` runs before the upstream TLS handshake starts, so it also sets the
ALPN offers of the upstream connection (`offer_upstream`: D82, D305).
"""

from __future__ import annotations

from mitmproxy import connection, ctx
from mitmproxy.proxy import server_hooks

from sandbox_egress.addons.failclosed import failclosed
from sandbox_egress.proxy.decision import Stage
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.stages import upstream_offers

Address = tuple[str, int]
NO_DECISION = "egress: no policy decision for this destination"


class Pinning:
    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics
        self._pins: dict[str, dict[Address, Address]] = {}  # client id -> destination -> address
        self._renamed: dict[str, Address] = {}  # server id -> the destination it was opened for

    def pin(self, client: connection.Client, destination: Address, address: Address) -> None:
        self._pins.setdefault(client.id, {})[destination] = address

    def pinned(self, client: connection.Client, destination: Address) -> Address | None:
        return self._pins.get(client.id, {}).get(destination)

    def forget(self, client: connection.Client) -> None:
        """Drop every pin of this client: no upstream connection opens for it any more."""
        self._pins.pop(client.id, None)

    def client_disconnected(self, client: connection.Client) -> None:
        self._pins.pop(client.id, None)

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        server = data.server
        opened = False
        with failclosed(self.metrics, Stage.UPSTREAM):
            destination = server.address
            address = self.pinned(data.client, destination) if destination else None
            if destination is None or address is None:
                server.error = NO_DECISION
                return
            self._renamed[server.id] = destination
            server.address = address
            offer_upstream(data.client, server)
            opened = True
        if not opened:
            server.error = "egress: policy error"

    def server_connected(self, data: server_hooks.ServerConnectionHookData) -> None:
        destination = self._renamed.pop(data.server.id, None)
        if destination is not None:
            # `Server.__setattr__` refuses address changes on an open connection (they
            # would not move it); this one only relabels the socket with its host name.
            object.__setattr__(data.server, "address", destination)

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._renamed.pop(data.server.id, None)


def offer_upstream(client: connection.Client, server: connection.Server) -> None:
    """mitmproxy's TlsConfig offers upstream exactly what the client offered: with only
    `h2`, an HTTP/1.1-only upstream refuses the handshake (no common protocol) and every
    request gets a 502, so `http/1.1` is offered too; mitmproxy then translates (D82).
    HTTP/3's names are never offered over TCP (D305). Offers set already are kept."""
    if server.alpn_offers:
        return
    offers = upstream_offers(tuple(client.alpn_offers), ctx.options.http2)
    if offers != tuple(client.alpn_offers):
        server.alpn_offers = offers
