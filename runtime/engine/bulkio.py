"""Larger reads and fewer waits on every leg of a connection (issue 36, D272).

mitmproxy's connection handler reads 64 KiB at a time and, after every read, waits for
every writer of the connection to drain below asyncio's default high-water mark (64 KiB).
A bulk body therefore goes through the layers in 64 KiB pieces, each one a full pass of
events, commands and hooks, and the reader stops whenever one TLS record is still queued.

`widen` changes two numbers per connection, nothing else:
* `READ_SIZE`: each read takes up to 256 KiB (what asyncio's selector transport hands on
  in one `recv`), so one pass through the layers carries four times the bytes;
* `HIGH_WATER`: a writer's transport pauses the reader only above 512 KiB queued, so
  `drain` returns at once while the peer keeps up.

Backpressure is kept: after each read the handler still awaits every writer's `drain`,
which waits while a writer holds more than `HIGH_WATER`; what one connection buffers is
bounded by `HIGH_WATER` plus one read's worth of bytes (tests/runtime/test_bulkio.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mitmproxy.connection import Connection, ConnectionState
from mitmproxy.proxy import events

from sandbox_egress.runtime.engine import idlewaiters

READ_SIZE = 256 * 1024
# An HTTP/1 upstream leg keeps mitmproxy's read size: with 256 KiB reads there, scenario 3's
# download cost more CPU per GiB (4.6-4.7 s against 3.9), h11 copying its receive buffer.
# An HTTP/2 upstream leg reads `READ_SIZE`: a curl download of 1 GiB over HTTP/2 cost 6.3 s
# of CPU against 7.3 s with 64 KiB reads (D290).
SERVER_READ_SIZE = 65535
HIGH_WATER = 512 * 1024
LOW_WATER = HIGH_WATER // 4


def widen_writer(writer: asyncio.StreamWriter | None) -> None:
    """The writer's transport pauses its producer only above `HIGH_WATER` bytes queued."""
    if writer is not None and not writer.is_closing():
        writer.transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)


# Upstream legs whose body `runtime.engine.relay` is carrying below the layers (no h11
# buffer there): they read `READ_SIZE` too while it does (issue 49, D564).
relaying: set[Connection] = set()


def read_size(connection: Connection, client: bool) -> int:
    """How much one read of `connection` takes: `READ_SIZE` on the client leg, on an
    HTTP/2 upstream leg (h2 parses frames from a buffer it trims in place, D290) and on an
    upstream leg the body relay is reading, mitmproxy's 65535 on another HTTP/1 upstream
    leg (h11 copies its receive buffer per read)."""
    if client or connection.alpn == b"h2" or connection in relaying:
        return READ_SIZE
    return SERVER_READ_SIZE


def widen(handler: Any) -> None:
    """`handler` (a mitmproxy `ConnectionHandler`) reads `READ_SIZE` at a time on each leg
    and lets its writers queue up to `HIGH_WATER` before the reads wait."""

    async def handle_connection(connection: Connection) -> None:
        await _handle_connection(handler, connection)

    handler.handle_connection = handle_connection


async def _handle_connection(handler: Any, connection: Connection) -> None:
    # mitmproxy 12's `ConnectionHandler.handle_connection`, with `READ_SIZE` for 65535 and
    # the writer widened first; tests/runtime/test_bulkio.py pins the loop's behaviour.
    io = handler.transports[connection]
    widen_writer(io.writer)
    idlewaiters.lighten_writer(io.writer)  # its drain waiters a list, not a deque (D307)
    reader = io.reader
    if reader is None:  # mitmproxy's `assert reader` (stripped by -O): every TCP leg has one
        raise RuntimeError("a connection without a stream reader")
    client = connection is handler.client
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            data = await reader.read(read_size(connection, client))
            if not data:
                raise OSError("Connection closed by peer.")
        except OSError:
            break
        except asyncio.CancelledError as e:
            cancelled = e
            break
        await handler.server_event(events.DataReceived(connection, data))
        del data  # not held while the next read waits: an idle leg keeps no read (D306)
        try:
            await handler.drain_writers()
        except asyncio.CancelledError as e:
            cancelled = e
            break

    if cancelled is None and connection.transport_protocol == "tcp":
        connection.state &= ~ConnectionState.CAN_READ
    else:
        connection.state = ConnectionState.CLOSED

    await handler.server_event(events.ConnectionClosed(connection))

    if connection.state is ConnectionState.CAN_WRITE:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as e:
            cancelled = e

    try:
        writer = handler.transports[connection].writer
        if writer is not None:  # mitmproxy's `assert writer` (stripped by -O)
            writer.close()
    except OSError:
        pass
    handler.transports.pop(connection)
    relaying.discard(connection)

    if cancelled:
        raise cancelled
