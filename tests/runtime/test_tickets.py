"""runtime/engine/tickets.py and the engine's NoSessionTickets (D301): a real TLS client through
the lean engine sees no NewSessionTicket; OpenSSL's own option would not have stopped them.

Real TLS on loopback: Python's `ssl` as the client (its message callback counts the
handshake messages it reads), the lean engine in this process, a TLS upstream of
testbed.fixed_upstream.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
from OpenSSL import SSL

from sandbox_egress.runtime.engine import tickets
from sandbox_egress.runtime.engine.lean import NoSessionTickets
from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine

BODY = b"tickets"
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _counting_client() -> tuple[ssl.SSLContext, list[Any]]:
    """A client context that writes down the handshake messages it reads."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    read: list[Any] = []

    def seen(
        _conn: Any, direction: str, _version: Any, kind: Any, message: Any, _data: Any
    ) -> None:
        if direction == "read" and kind == ssl._TLSContentType.HANDSHAKE:  # type: ignore[attr-defined]
            read.append(message)

    context._msg_callback = seen  # type: ignore[attr-defined]
    return context, read


def _tickets(read: list[Any]) -> int:
    ticket = ssl._TLSMessageType.NEWSESSION_TICKET  # type: ignore[attr-defined]
    return len([m for m in read if m == ticket])


def _pyopenssl_server_tickets(tmp_path: Path, options: int) -> int:
    """NewSessionTickets a pyOpenSSL server context with `options` sends a TLS 1.3 client."""
    server_context(tmp_path)  # writes up.pem: a certificate and its key
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.use_certificate_chain_file(str(tmp_path / "up.pem"))
    context.use_privatekey_file(str(tmp_path / "up.pem"))
    context.set_options(options)
    context.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    ours, theirs = socket.socketpair()
    server = SSL.Connection(context, ours)
    server.set_accept_state()

    def serve() -> None:
        server.do_handshake()
        server.sendall(server.recv(100))

    thread = threading.Thread(target=serve)
    thread.start()
    client_context, read = _counting_client()
    with client_context.wrap_socket(theirs, server_hostname="localhost") as client:
        client.sendall(b"hi")
        assert client.recv(10) == b"hi"
        assert client.version() == "TLSv1.3"
    thread.join(10)
    ours.close()
    return _tickets(read)


def test_openssls_no_ticket_option_still_sends_tls13_tickets(tmp_path: Path) -> None:
    # Why the engine needs SSL_set_num_tickets: the option turns the tickets stateful.
    assert _pyopenssl_server_tickets(tmp_path, 0) == 2
    assert _pyopenssl_server_tickets(tmp_path, SSL.OP_NO_TICKET) == 2


def test_the_setter_is_found_and_checked_in_the_installed_cryptography() -> None:
    found = tickets.resolve()
    assert found is not None
    made = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD))
    assert found.get(made) == tickets.OPENSSL_DEFAULT_TICKETS
    assert found.set(made, 1) and found.get(made) == 1


def test_a_module_without_the_symbols_gives_none(tmp_path: Path) -> None:
    not_elf = tmp_path / "not.so"
    not_elf.write_bytes(b"MZ" + bytes(100))
    assert tickets.symbol_values(not_elf, ("SSL_new",)) == {}
    from cryptography.hazmat.bindings import _rust

    assert tickets.symbol_values(Path(_rust.__file__ or ""), ("no_such_symbol_here",)) == {}


def test_a_module_that_cannot_be_read_leaves_tickets_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*_: Any) -> dict[str, int]:
        raise OSError("unreadable")

    monkeypatch.setattr(tickets, "symbol_values", unreadable)
    tickets.resolve.cache_clear()
    try:
        assert tickets.resolve() is None
        addon = NoSessionTickets()
        made = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD))
        addon.tls_start_client(_tls_data(made))  # nothing to call, nothing raised
        tickets.resolve.cache_clear()
        monkeypatch.setattr(tickets, "symbol_values", lambda *_: {"SSL_new": 1})
        assert tickets.resolve() is None
    finally:
        tickets.resolve.cache_clear()


def _tls_data(made: SSL.Connection | None) -> Any:
    from mitmproxy import connection, options
    from mitmproxy.proxy import context
    from mitmproxy.proxy.layers import tls

    client = connection.Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2))
    return tls.TlsData(client, context.Context(client, options.Options()), made)


async def _through_engine(tmp_path: Path, connections: int) -> list[int]:
    """Tickets each of `connections` new CONNECT + TLS connections read from the engine."""
    up = await asyncio.get_running_loop().create_server(
        FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=server_context(tmp_path)
    )
    up_port = up.sockets[0].getsockname()[1]
    master, running, port = await start_lean_engine(tmp_path / "conf")
    counts = []
    try:
        for _ in range(connections):
            client_tls, read = _counting_client()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % up_port)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await writer.start_tls(client_tls, server_hostname="localhost")
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost:%d\r\n\r\n" % up_port)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            assert await reader.readexactly(len(BODY)) == BODY
            assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
            writer.close()
            counts.append(_tickets(read))
    finally:
        master.shutdown()
        await asyncio.wait_for(running, 20)
        up.close()
    return counts


def test_a_tls13_client_through_the_engine_reads_no_session_ticket(tmp_path: Path) -> None:
    assert asyncio.run(_through_engine(tmp_path, 3)) == [0, 0, 0]
