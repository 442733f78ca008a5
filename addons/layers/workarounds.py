"""mitmproxy behaviours the egress addons work around, each named and kept here.

* `hang_up`: after a kill, mitmproxy can leave the client's socket open (below).
* `refuse_raw_tcp`: mitmproxy's TCP layer ignores a kill from `tcp_start` and relays
  anyway, to the address the CONNECT pinned; unpinning makes the upstream connection
  fail (no decision, no connection), and the TCP layer then closes the client.
* `wrapped_in`: whether a wrapper is in a chain of wrappers of one layer method
  (`addons.layers.pushgate` and `addons.layers.linger` wrap `HttpStream._handle_event` in turn).
* `relay`: the loop that drives a wrapped layer method's command generator as mitmproxy
  would, with a say on each command (`addons.layers.limits`, `addons.upstream`).

If mitmproxy changes shape under one of them, tests/addons and tests/e2e say so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

from mitmproxy import connection, tcp
from mitmproxy.proxy import commands

from sandbox_egress.addons import mitm
from sandbox_egress.addons.pinning import Pinning

log = logging.getLogger("egress")

Commands = Generator[commands.Command, Any, None]


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


def wrapped_in(handler: Any, marker: str) -> bool:
    """Whether the wrapper carrying `marker` is in the chain of `handler` (a layer
    method the addons wrap in turn: each wrapper names its inner one, `INNER`)."""
    for _ in range(16):  # a chain of a few wrappers; never a loop
        if handler is None:
            return False
        if getattr(handler, marker, False):
            return True
        inner = getattr(handler, INNER, None)
        handler = inner() if inner is not None else None
    return False


INNER = "_egress_inner"  # on a wrapper: a function returning the handler it wraps


def relay(
    inner: Commands,
    instead: Callable[[commands.Command], Commands | None],
    *,
    last: bool = False,
) -> Generator[commands.Command, Any, bool]:
    """Drive `inner`, a layer's command generator, as the layer's caller would.

    Each command `inner` yields goes out and the reply comes back to it, unless
    `instead(command)` gives commands to send in its place: those go out and `inner` gets
    None as its reply or, with `last`, `inner` is closed first and the relay ends there.
    Returns True when `inner` ran to its end, False when `last` ended it; what `inner`
    raises reaches the caller.
    """
    reply: Any = None
    while True:
        try:
            command = inner.send(reply)
        except StopIteration:
            return True
        replacement = instead(command)
        if replacement is None:
            reply = yield command
            continue
        if last:
            inner.close()
            yield from replacement
            return False
        yield from replacement
        reply = None
