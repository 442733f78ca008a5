"""What an idle intercepted connection keeps in Python (D306-D308): no last read held by
either leg's reading loop, waiter lists instead of deques, one registration context (not
two) suspended for its life; and it still serves.

Real TLS on loopback: Python's `ssl` as the client, the lean engine in this process, a TLS
upstream of testbed.fixed_upstream. The connection's objects are read from the engine's
`proxyserver` (its handlers, their transports and reading tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from OpenSSL import SSL
from OpenSSL._util import lib as _ssl_lib

from sandbox_egress.runtime.engine.lean import ReleaseIdleTlsBuffers
from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine

BODY = b"idle" * 100
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _reading_frames(handler: Any) -> list[Any]:
    """The frames of the reading loops (`bulkio._handle_connection`) of `handler`'s legs."""
    found = []
    for io in handler.transports.values():
        awaited = io.handler.get_coro() if io.handler is not None else None
        while inspect.iscoroutine(awaited):
            if awaited.cr_code.co_name == "_handle_connection":
                found.append(awaited.cr_frame)
            awaited = awaited.cr_await
    return found


def _registrations(handler: Any) -> list[Any]:
    """The `register_connection` generators suspended for `handler` (mitmproxy's own, and
    any engine override that wraps it)."""
    return [
        each
        for each in gc.get_objects()
        if inspect.isgenerator(each)
        and each.gi_code.co_name == "register_connection"
        and each.gi_frame is not None
        and each.gi_frame.f_locals.get("handler") is handler
    ]


def _releasing(master: Any) -> list[bool]:
    """Per TLS leg the engine made: whether OpenSSL frees its record buffers while idle
    (`SSL_MODE_RELEASE_BUFFERS`, D144; `SSL_set_mode(ssl, 0)` answers the mode)."""
    (addon,) = [each for each in master.addons.chain if isinstance(each, ReleaseIdleTlsBuffers)]
    return [
        bool(_ssl_lib.SSL_set_mode(conn._ssl, 0) & SSL.MODE_RELEASE_BUFFERS)
        for conn in addon.sweeper.connections
    ]


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
    writer.write(b"GET / HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % port)
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    assert await reader.readexactly(len(BODY)) == BODY


@contextlib.asynccontextmanager
async def idle_tunnel(
    tmp_path: Path,
) -> AsyncIterator[tuple[Any, Any, Callable[[], Awaitable[None]]]]:
    """A lean engine with one CONNECT + TLS connection after one GET, idle: (the master,
    the connection's handler, another GET on it); the engine stopped after."""
    up = await asyncio.get_running_loop().create_server(
        FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(tmp_path)
    )
    up_port = up.sockets[0].getsockname()[1]
    master, running, port = await start_lean_engine(tmp_path / "conf")
    try:
        client_tls = ssl.create_default_context()
        client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % up_port)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await writer.start_tls(client_tls, server_hostname="localhost")
        await _get(reader, writer, up_port)
        await asyncio.sleep(0.2)  # both legs back in their reads
        (handler,) = master.addons.get("proxyserver").connections.values()
        yield master, handler, lambda: _get(reader, writer, up_port)
        writer.close()
    finally:
        master.shutdown()
        await asyncio.wait_for(running, 20)
        up.close()


async def _idle_connection(tmp_path: Path) -> dict[str, Any]:
    """One CONNECT + TLS connection after one GET, idle: what its handler keeps; then a
    second GET on it."""
    async with idle_tunnel(tmp_path) as (master, handler, again):
        frames = _reading_frames(handler)
        kept = {
            "legs": len(handler.transports),
            "reading loops": len(frames),
            "held reads": [frame.f_locals.get("data") for frame in frames],
            "drain waiters": [
                type(io.writer._protocol._drain_waiters) for io in handler.transports.values()
            ],
            "watchdog waiters": type(handler.timeout_watchdog.can_timeout._waiters),
            "registrations suspended": len(_registrations(handler)),
            "tls legs releasing record buffers": _releasing(master),
        }
        await again()
        kept["second request"] = "served"
        return kept


def test_an_idle_connection_holds_no_read_and_no_deque_and_still_serves(tmp_path: Path) -> None:
    assert asyncio.run(_idle_connection(tmp_path)) == {
        "legs": 2,
        "reading loops": 2,
        "held reads": [None, None],
        "drain waiters": [list, list],
        "watchdog waiters": list,
        "registrations suspended": 1,
        "tls legs releasing record buffers": [True, True],
        "second request": "served",
    }
