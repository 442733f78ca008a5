"""Backpressure toward HTTP/2 clients: stop reading upstreams while a client's queue is full.

mitmproxy's `BufferedH2Connection` queues the DATA that an HTTP/2 client's flow-control
window does not admit yet, and mitmproxy keeps reading the upstream meanwhile: a
sandbox that reads an HTTP/2 download slowly, or not at all, makes the proxy hold the
whole body (+260 MiB for 256 MiB before this module). HTTP/1 has no such queue: its
writes go to the socket, whose `drain()` already holds the upstream back.

Two wrappers, installed by `addons.limits.install`:
* `Http2Server._handle_event`: after each event, the bytes queued for the client
  decide whether that client is congested (over `H2_CLIENT_QUEUE_LIMIT`) or flowing
  again (at half of it): one `asyncio.Event` per client connection, set while flowing.
* `ConnectionHandler.drain_writers`: a task that reads a server connection waits, after
  the usual drain, while its client is congested. The client's own task never waits
  there: it must keep reading the WINDOW_UPDATE frames that drain the queue.

So the queue holds at most the limit plus one upstream read (64 KiB; 256 KiB from an HTTP/2
upstream, D290). Uploads from an HTTP/2 client to an HTTP/2 upstream are not covered
(docs/decisions.md, D26).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.server import ConnectionHandler

from sandbox_egress.proxy.limits import H2_CLIENT_QUEUE_LIMIT

_original_h2_server = _http2.Http2Server._handle_event
# mitmproxy leaves `drain_writers` unannotated; its type as used here (D151).
_original_drain: Callable[[ConnectionHandler], Awaitable[None]] = ConnectionHandler.drain_writers
_flowing: dict[str, asyncio.Event] = {}  # client connection id -> set while not congested


def install() -> None:
    _http2.Http2Server._handle_event = _watching_h2_server  # type: ignore[method-assign]
    ConnectionHandler.drain_writers = _draining  # type: ignore[method-assign]


def forget(client_id: str) -> None:
    """The client is gone: wake whatever still waits for it, and drop its event."""
    flowing = _flowing.pop(client_id, None)
    if flowing is not None:
        flowing.set()


def queued(server: _http2.Http2Server) -> int:
    """Bytes of DATA queued for the client, waiting for its flow-control window."""
    return sum(len(item.data) for queue in server.h2_conn.stream_buffers.values() for item in queue)


def _watching_h2_server(
    self: _http2.Http2Server, event: events.Event
) -> Generator[commands.Command, Any, None]:
    yield from _original_h2_server(self, event)
    size = queued(self) if self.h2_conn.stream_buffers else 0
    flowing = _flowing.get(self.conn.id)
    if size > H2_CLIENT_QUEUE_LIMIT:
        if flowing is None:
            flowing = _flowing[self.conn.id] = asyncio.Event()
        flowing.clear()
    elif flowing is not None and size <= H2_CLIENT_QUEUE_LIMIT // 2:
        flowing.set()


async def _draining(self: ConnectionHandler) -> None:
    await _original_drain(self)
    flowing = _flowing.get(self.client.id)
    if flowing is None or flowing.is_set():
        return
    own = self.transports.get(self.client)
    if own is not None and asyncio.current_task() is own.handler:
        return  # the client's reader: it brings the WINDOW_UPDATEs
    await flowing.wait()  # cancelled with the connection if the client never reads again
