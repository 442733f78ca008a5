"""runtime/engine/idlebios.py: an idle TLS connection gives back its memory BIOs' buffers (issue 36,
D299). Real pyOpenSSL connections, a client and a server talking through their memory BIOs
as mitmproxy's TLS layer does (no socket: the bytes are carried by the test)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import platform

import pytest
from mitmproxy.proxy.layers import tls as tls_layer
from OpenSSL import SSL

from sandbox_egress.runtime.engine import idlebios
from sandbox_egress.runtime.engine.lean import ReleaseIdleTlsBuffers
from testbed.heap import malloc_in_use
from testbed.testca import self_signed


def _contexts() -> tuple[SSL.Context, SSL.Context]:
    cert, key = self_signed()
    server = SSL.Context(SSL.TLS_SERVER_METHOD)
    server.use_certificate(cert)
    server.use_privatekey(key)
    client = SSL.Context(SSL.TLS_CLIENT_METHOD)
    client.set_verify(SSL.VERIFY_NONE)
    return server, client


def _carry(a: SSL.Connection, b: SSL.Connection) -> None:
    """Move what each side wrote to the other, until nothing moves."""
    moved = True
    while moved:
        moved = False
        for source, sink in ((a, b), (b, a)):
            try:
                data = source.bio_read(1 << 20)
            except SSL.WantReadError:
                continue
            if data:
                sink.bio_write(data)
                moved = True


def _receive(conn: SSL.Connection) -> bytes:
    got = b""
    while True:
        try:
            got += conn.recv(1 << 16)
        except SSL.WantReadError:
            return got


def _pair(contexts: tuple[SSL.Context, SSL.Context]) -> tuple[SSL.Connection, SSL.Connection]:
    server, client = SSL.Connection(contexts[0]), SSL.Connection(contexts[1])
    server.set_accept_state()
    client.set_connect_state()
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(SSL.WantReadError):
                side.do_handshake()
        _carry(client, server)
    return server, client


def _exchange(server: SSL.Connection, client: SSL.Connection, size: int) -> None:
    client.send(b"GET / HTTP/1.1\r\n\r\n")
    _carry(client, server)
    assert _receive(server) == b"GET / HTTP/1.1\r\n\r\n"
    body = b"b" * size
    for at in range(0, size, 16000):
        server.send(body[at : at + 16000])
    _carry(client, server)
    assert _receive(client) == body


@pytest.fixture(scope="module")
def contexts() -> tuple[SSL.Context, SSL.Context]:
    return _contexts()


def test_a_released_connection_keeps_talking_both_ways(
    contexts: tuple[SSL.Context, SSL.Context],
) -> None:
    server, client = _pair(contexts)
    _exchange(server, client, 64_000)
    old = (server._into_ssl, server._from_ssl)
    assert (idlebios.release(server), idlebios.release(client)) == (True, True)
    assert (server._into_ssl, server._from_ssl) != old
    # Unused since: nothing to give back, nothing done.
    assert (idlebios.release(server), idlebios.release(client)) == (False, False)
    _exchange(server, client, 64_000)  # the same session, new BIOs: same bytes both ways
    client.send(b"after")
    _carry(client, server)
    assert _receive(server) == b"after"


def test_a_bio_with_unread_bytes_is_not_replaced(
    contexts: tuple[SSL.Context, SSL.Context],
) -> None:
    server, client = _pair(contexts)
    client.send(b"in flight")
    assert idlebios.release(client) is False  # its outgoing BIO holds the record
    server.bio_write(client.bio_read(1 << 16))
    assert idlebios.release(server) is False  # its incoming BIO holds it, not yet read
    assert _receive(server) == b"in flight"
    assert idlebios.release(server) is True


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")
def test_a_sweep_gives_back_what_a_large_response_left(
    contexts: tuple[SSL.Context, SSL.Context],
) -> None:
    sweeper = idlebios.Sweeper()
    pairs = [_pair(contexts) for _ in range(20)]
    for server, client in pairs:
        _exchange(server, client, 64_000)
        sweeper.add(server)
        sweeper.add(client)
    gc.collect()
    before = malloc_in_use()
    assert sweeper.sweep() == 40
    gc.collect()
    freed = (before - malloc_in_use()) / len(pairs)
    # Each pair's BIOs held the 64 KB response twice (written by one side, read by the
    # other) and the handshake: at least 100 KiB per pair given back (about 150 measured).
    assert freed > 100 * 1024
    assert sweeper.sweep() == 0  # idle since: nothing more
    del pairs, server, client  # the loop's names held the last pair
    gc.collect()
    assert len(sweeper.connections) == 0  # kept weakly: a closed connection is not held


def test_the_engine_addon_sweeps_while_running() -> None:
    addon = ReleaseIdleTlsBuffers()
    assert addon.sweeper.interval == idlebios.SWEEP_INTERVAL_S == 1.0

    async def run() -> tuple[bool, bool]:
        addon.running()
        task = addon._sweeping
        assert task is not None and task.get_name() == "release-idle-bios"
        await asyncio.sleep(0)
        alive = not task.done()
        addon.done()
        await asyncio.gather(task, return_exceptions=True)
        return alive, task.cancelled()

    assert asyncio.run(run()) == (True, True)


def test_mitmproxy_never_shuts_a_bio_down() -> None:
    # A replacement BIO has pyOpenSSL's default end-of-data behaviour; mitmproxy's TLS
    # layer must not rely on another (`bio_shutdown` sets one), or a release would lose it.
    assert "bio_shutdown" not in inspect.getsource(tls_layer)
