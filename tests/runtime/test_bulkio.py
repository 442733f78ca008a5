"""runtime/engine/bulkio.py: a connection's legs read `READ_SIZE` at a time, writers queue up to
`HIGH_WATER`, and a slow reader still holds the proxy to `HIGH_WATER` plus one read.

Real loopback sockets and asyncio streams; the relay between them is a stand-in for
mitmproxy's layers (a `DataReceived` on one leg becomes a write on the other) and the
drain is mitmproxy's own `ConnectionHandler.drain_writers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy.connection import Client, Server
from mitmproxy.proxy import events
from mitmproxy.proxy.server import ConnectionHandler, ConnectionIO

from sandbox_egress.runtime.engine import bulkio


class Relay:
    """What `widen` needs of a connection handler: `transports`, `server_event` and
    `drain_writers` (mitmproxy's). Bytes read on `source` are written to `target`."""

    def __init__(self) -> None:
        self.transports: dict[Any, ConnectionIO] = {}
        self._drain_lock = asyncio.Lock()
        self.reads: list[int] = []
        self.peak_queued = 0
        self.source: Any = None
        self.target: Any = None
        self.client: Any = None

    async def server_event(self, event: events.Event) -> None:
        if isinstance(event, events.DataReceived):
            self.reads.append(len(event.data))
            writer = self.transports[self.target].writer
            assert writer is not None
            writer.write(event.data)
            self.peak_queued = max(self.peak_queued, writer.transport.get_write_buffer_size())
        elif isinstance(event, events.ConnectionClosed) and event.connection is self.source:
            writer = self.transports[self.target].writer
            assert writer is not None
            writer.write_eof()

    async def drain_writers(self) -> None:
        await ConnectionHandler.drain_writers(self)  # type: ignore[arg-type]


async def _pipe() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, socket.socket]:
    """A connected loopback pair: asyncio streams on one end, a blocking-free socket on
    the other."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    peer, _ = listener.accept()
    listener.close()
    peer.setblocking(False)
    return reader, writer, peer


async def _relay(
    payload: bytes,
    send_size: int,
    sink_delay: float,
    client_leg: bool = True,
    alpn: bytes | None = None,
) -> tuple[bytes, Relay]:
    loop = asyncio.get_running_loop()
    relay = Relay()
    src_reader, src_writer, sender = await _pipe()
    dst_reader, dst_writer, receiver = await _pipe()
    # Small kernel buffers on the sink side, so the slow reader is felt by the proxy.
    receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    # And on the proxy's side of it: the kernel's send buffer, autotuned up to 4 MiB, would
    # otherwise take the whole payload on a fast run and leave asyncio's queue empty.
    dst_writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    relay.source = Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), timestamp_start=0)
    relay.source.alpn = alpn
    relay.target = Server(address=("127.0.0.1", 3))
    # A handler always has a client: on the upstream leg it is another connection (the
    # drain another test's addons.backpressure installs reads its id).
    relay.client = (
        relay.source
        if client_leg
        else Client(peername=("127.0.0.1", 4), sockname=("127.0.0.1", 2), timestamp_start=0)
    )
    relay.transports[relay.source] = ConnectionIO(
        handler=None, reader=src_reader, writer=src_writer
    )
    relay.transports[relay.target] = ConnectionIO(
        handler=None, reader=dst_reader, writer=dst_writer
    )
    bulkio.widen(relay)
    # Both legs handled as mitmproxy's handler does: each widens its own writer.
    handling = [
        asyncio.create_task(relay.handle_connection(leg))  # type: ignore[attr-defined]
        for leg in (relay.source, relay.target)
    ]

    async def send() -> None:
        for at in range(0, len(payload), send_size):
            await loop.sock_sendall(sender, payload[at : at + send_size])
        sender.shutdown(socket.SHUT_WR)

    async def receive() -> bytes:
        got = bytearray()
        while True:
            chunk = await loop.sock_recv(receiver, 8192)
            if not chunk:
                return bytes(got)
            got += chunk
            if sink_delay:
                await asyncio.sleep(sink_delay)

    sending = asyncio.create_task(send())
    received = await asyncio.wait_for(receive(), 30)
    await sending
    for task in handling:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    dst_writer.close()
    sender.close()
    receiver.close()
    return received, relay


def test_a_slow_reader_holds_the_proxy_to_the_high_water_mark_plus_one_read() -> None:
    payload = bytes(range(256)) * (16 * 1024)  # 4 MiB, far above what may be buffered
    received, relay = asyncio.run(_relay(payload, send_size=1 << 20, sink_delay=0.0005))
    assert received == payload
    assert max(relay.reads) <= bulkio.READ_SIZE
    assert relay.peak_queued <= bulkio.HIGH_WATER + bulkio.READ_SIZE
    # The queue did grow past asyncio's default 64 KiB: the wider mark is in effect.
    assert relay.peak_queued > 64 * 1024


def test_the_512_kib_writer_mark_lets_more_than_a_64_kib_mark_and_one_read_queue() -> None:
    # With asyncio's 64 KiB mark the queue never exceeds 64 KiB plus one read (320 KiB):
    # the reader waits on `drain` as soon as one read is queued.
    payload = bytes(range(256)) * (16 * 1024)
    received, relay = asyncio.run(_relay(payload, send_size=1 << 20, sink_delay=0.0005))
    assert received == payload
    assert relay.peak_queued > 64 * 1024 + bulkio.READ_SIZE
    assert relay.peak_queued <= bulkio.HIGH_WATER + bulkio.READ_SIZE


def test_reads_take_more_than_mitmproxys_64_kib_when_bytes_are_waiting() -> None:
    payload = b"\x00" * (8 << 20)
    received, relay = asyncio.run(_relay(payload, send_size=1 << 20, sink_delay=0))
    assert received == payload
    assert max(relay.reads) > 65535


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(min_value=1, max_value=1_500_000),
    send_size=st.sampled_from([1, 1000, 16384, 65535, 65536, 262144, 262145, 1 << 20]),
)
def test_every_byte_arrives_once_in_order_whatever_the_chunk_sizes(
    size: int, send_size: int
) -> None:
    payload = bytes((i * 7 + size) & 0xFF for i in range(min(size, 256))) * (size // 256 + 1)
    payload = payload[:size]
    send_size = max(send_size, size // 2000)  # keep the one-byte sends to a bounded count
    received, relay = asyncio.run(_relay(payload, send_size=send_size, sink_delay=0))
    assert received == payload
    assert sum(relay.reads) == size
    assert max(relay.reads) <= bulkio.READ_SIZE


def test_an_upstream_leg_keeps_mitmproxys_read_size() -> None:
    payload = b"\x00" * (4 << 20)
    received, relay = asyncio.run(_relay(payload, 1 << 20, sink_delay=0, client_leg=False))
    assert received == payload
    assert max(relay.reads) <= bulkio.SERVER_READ_SIZE


READ_SIZES = [
    ("the client leg", True, None, bulkio.READ_SIZE),
    ("the client leg speaking HTTP/2", True, b"h2", bulkio.READ_SIZE),
    ("an upstream leg before its handshake", False, None, bulkio.SERVER_READ_SIZE),
    ("an HTTP/1.1 upstream leg", False, b"http/1.1", bulkio.SERVER_READ_SIZE),
    ("an HTTP/2 upstream leg", False, b"h2", bulkio.READ_SIZE),
]


@pytest.mark.parametrize(
    ("client", "alpn", "expected"), [c[1:] for c in READ_SIZES], ids=[c[0] for c in READ_SIZES]
)
def test_read_size(client: bool, alpn: bytes | None, expected: int) -> None:
    connection = Server(address=("127.0.0.1", 3))
    connection.alpn = alpn
    assert bulkio.read_size(connection, client) == expected


def test_an_http2_upstream_leg_reads_more_than_mitmproxys_64_kib() -> None:
    payload = b"\x00" * (8 << 20)
    received, relay = asyncio.run(
        _relay(payload, 1 << 20, sink_delay=0, client_leg=False, alpn=b"h2")
    )
    assert received == payload
    assert max(relay.reads) > bulkio.SERVER_READ_SIZE
    assert max(relay.reads) <= bulkio.READ_SIZE


def test_an_upstream_leg_the_body_relay_reads_reads_wide_until_it_stops() -> None:
    connection = Server(address=("127.0.0.1", 3))
    connection.alpn = b"http/1.1"
    bulkio.relaying.add(connection)  # what runtime/engine/relay.py does (D564)
    try:
        assert bulkio.read_size(connection, False) == bulkio.READ_SIZE
    finally:
        bulkio.relaying.discard(connection)
    assert bulkio.read_size(connection, False) == bulkio.SERVER_READ_SIZE
