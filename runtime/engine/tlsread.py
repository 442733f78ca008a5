"""What a TLS leg decrypts, copied once instead of three times (issue 36, D304).

mitmproxy's `TLSLayer.receive_data` calls pyOpenSSL's `recv(65535)` until OpenSSL has no
more plaintext: each call allocates a 64 KiB buffer, decrypts one TLS record (at most 16 KiB)
into it and copies the record out as `bytes`; each piece is then appended to a
`bytearray` (a second copy) that is turned into `bytes` at the end (a third). For a 256 KiB
read of an upload that is sixteen allocations and three copies of every byte, about a tenth
of the proxy's CPU in the upload's profile.

`install()` replaces that method with one that decrypts every record into one buffer,
sized for the ciphertext just written (plaintext is never longer), with OpenSSL's
`SSL_read` at an offset, and makes the one `bytes` of it at the end. Errors are pyOpenSSL's
own (`Connection._raise_ssl_error` after every `SSL_read`, as `recv` does) and are handled
as mitmproxy does: no more data, a close_notify, or a logged TLS error; what follows
(`tls_interact`, the `DataReceived` to the child, the close) is mitmproxy's code, unchanged.

On the way out, mitmproxy's `tls_interact` reads what OpenSSL wrote 65,535 bytes at a time,
one `SendData` each, which `runtime.engine.coalesce` then joins into one write (another copy). On
a TCP leg the replacement reads all of it at once (`BIO_get_mem_data` says how much), one
`SendData`; a datagram leg keeps mitmproxy's reads. tests/runtime/test_tlsread.py pins the
methods this replaces and checks bytes and events against them over real TLS records.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from mitmproxy import connection
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import tls
from OpenSSL import SSL
from OpenSSL._util import ffi as _ffi
from OpenSSL._util import lib as _lib
from OpenSSL._util import no_zero_allocator

ORIGINAL_RECEIVE_DATA = tls.TLSLayer.receive_data
ORIGINAL_TLS_INTERACT = tls.TLSLayer.tls_interact
RECORD = 16 * 1024 + 256  # a TLS record's plaintext at most, and room to spare


def _plaintext(conn: SSL.Connection, hint: int) -> tuple[bytes, bool, SSL.Error | None]:
    """Every byte OpenSSL can decrypt now, whether a close_notify came, and the TLS error
    that ended the reading (None when it simply ran out of records)."""
    size = hint + RECORD
    buffer = no_zero_allocator("char[]", size)
    pieces: list[bytes] = []
    filled = 0
    ssl = conn._ssl
    while True:
        if filled == size:  # more than the hint (records written before this event)
            pieces.append(_ffi.buffer(buffer, filled)[:])
            filled = 0
        result = _lib.SSL_read(ssl, buffer + filled, size - filled)
        try:
            conn._raise_ssl_error(ssl, result)
        except SSL.WantReadError:
            break
        except SSL.ZeroReturnError:
            return _joined(pieces, buffer, filled), True, None
        except SSL.Error as e:
            return _joined(pieces, buffer, filled), False, e
        if result <= 0:  # OpenSSL said no error without data: nothing more to read
            break
        filled += result
    return _joined(pieces, buffer, filled), False, None


def _joined(pieces: list[bytes], buffer: Any, filled: int) -> bytes:
    last = _ffi.buffer(buffer, filled)[:] if filled else b""
    return b"".join([*pieces, last]) if pieces else last


def _receive_data(self: Any, data: bytes) -> Generator[commands.Command, Any, None]:
    if data:
        self.tls.bio_write(data)
    plaintext, close, error = _plaintext(self.tls, len(data))
    if error is not None:
        yield commands.Log(f"TLS Error: {error}", logging.WARNING)

    # mitmproxy's `receive_data` from here on.
    yield from self.tls_interact()

    if plaintext:
        yield from self.event_to_child(events.DataReceived(self.conn, plaintext))
    if close:
        self.conn.state &= ~connection.ConnectionState.CAN_READ
        if self.debug:
            yield commands.Log(f"{self.debug}[tls] close_notify {self.conn}", logging.DEBUG)
        yield from self.event_to_child(events.ConnectionClosed(self.conn))


def _tls_interact(self: Any) -> Generator[commands.Command, Any, None]:
    # mitmproxy reads OpenSSL's output 65,535 bytes at a time, one `SendData` each, which
    # `runtime.engine.coalesce` then joins (another copy): a TCP leg reads all of it at once.
    # A datagram leg keeps mitmproxy's reads.
    out = self.tls._from_ssl
    if self.conn.transport_protocol != "tcp" or out is None:
        yield from ORIGINAL_TLS_INTERACT(self)
        return
    pending = _lib.BIO_get_mem_data(out, _ffi.NULL)
    if pending > 0:
        yield commands.SendData(self.conn, self.tls.bio_read(pending))


def install() -> None:
    """From now on, TLS layers decrypt into one buffer per event and hand on what OpenSSL
    wrote in one piece (idempotent)."""
    tls.TLSLayer.receive_data = _receive_data  # type: ignore[method-assign]
    tls.TLSLayer.tls_interact = _tls_interact  # type: ignore[method-assign]
