"""mitmproxy behaviours the egress addons work around, each named and kept here.

* `hang_up`: after a kill, mitmproxy can leave the client's socket open (below).
* `refuse_raw_tcp`: mitmproxy's TCP layer ignores a kill from `tcp_start` and relays
  anyway, to the address the CONNECT pinned; unpinning makes the upstream connection
  fail (no decision, no connection), and the TCP layer then closes the client.

If mitmproxy changes shape under one of them, tests/addons and tests/e2e say so.
"""

from __future__ import annotations

import logging

from mitmproxy import connection, tcp

from addons import mitm
from addons.pinning import Pinning

log = logging.getLogger("egress")


def hang_up(client: connection.Client) -> None:
    """Close a killed client's socket.

    When body bytes arrive while mitmproxy handles a kill, it cancels its own reader
    inside `server_event`, and the `writer.close()` after its read loop is skipped (it
    is not in a `finally`): the socket would stay open, unread, until the sandbox gave
    up. This reaches into mitmproxy's connection table; if that ever changes shape,
    nothing happens and the flow is still killed.
    """
    try:
        server = mitm.addon("proxyserver")
        handler = server.connections.get(client.id) if server else None
        io = handler.transports.get(handler.client) if handler else None
        if io is not None and io.writer is not None:
            io.writer.transport.abort()
    except (AttributeError, LookupError, RuntimeError):
        log.debug("could not hang up a killed client connection", exc_info=True)


def refuse_raw_tcp(pinning: Pinning, flow: tcp.TCPFlow) -> None:
    """Kill a refused TCP flow so that no upstream connection opens (see module doc)."""
    pinning.forget(flow.client_conn)
    mitm.kill(flow)
