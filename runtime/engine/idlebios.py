"""An idle TLS connection gives back the buffers of its memory BIOs (issue 36, D299).

mitmproxy runs OpenSSL over two memory BIOs per TLS connection (pyOpenSSL's
`Connection(context, None)`): what arrives from the socket is written into one, what
OpenSSL sends is read out of the other. A memory BIO keeps the largest buffer it ever held
until the connection is freed: after the handshake about 9 KiB per intercepted connection
(both legs), after one 256 KiB response about 480 KiB (the upstream leg's read buffer and
the client leg's write buffer), held for as long as the client keeps the connection alive.
`SSL_MODE_RELEASE_BUFFERS` (D144) frees OpenSSL's record buffers, not these.

`release(connection)` replaces both BIOs of a connection with new, empty ones when both are
empty and one has been written since it was made (its data pointer is set); OpenSSL frees
the old ones (`SSL_set_bio`). `Sweeper` keeps the TLS connections the engine made (weakly)
and releases each every `interval` seconds: a connection in use regrows its buffers at most
once per interval; one idle since the last sweep costs two reads of a pointer.

Invariants: a BIO holding unread bytes is never replaced (nothing in flight is lost);
OpenSSL's own state (keys, sequence numbers, a decrypted record not read yet) is in the
SSL object, not in the BIOs, so a replacement between two calls is invisible to the
connection; the new BIOs are what pyOpenSSL makes (`BIO_s_mem`, default end-of-data
behaviour: mitmproxy never calls `bio_shutdown`, pinned by the tests); a connection
pyOpenSSL made over a socket (no BIOs) is skipped.
"""

from __future__ import annotations

import asyncio
import weakref

from OpenSSL import SSL
from OpenSSL._util import ffi as _ffi
from OpenSSL._util import lib as _lib

SWEEP_INTERVAL_S = 1.0

_DATA = _ffi.new("char **")  # BIO_get_mem_data's out-parameter (the event loop's thread only)
_NULL = _ffi.NULL
_get_mem_data = _lib.BIO_get_mem_data


def _state(bio: object) -> tuple[int, bool]:
    """(bytes unread, whether the BIO has a buffer) of a memory BIO."""
    unread = _get_mem_data(bio, _DATA)
    return unread, _DATA[0] != _NULL


def release(connection: SSL.Connection) -> bool:
    """Replace `connection`'s BIOs with new ones when both are empty and one was used since
    it was made; whether they were replaced."""
    into, out = connection._into_ssl, connection._from_ssl
    if into is None or out is None:
        return False  # over a socket: no memory BIOs
    into_unread, into_used = _state(into)
    out_unread, out_used = _state(out)
    if into_unread or out_unread or not (into_used or out_used):
        return False
    fresh_into = _lib.BIO_new(_lib.BIO_s_mem())
    fresh_out = _lib.BIO_new(_lib.BIO_s_mem())
    if fresh_into == _ffi.NULL or fresh_out == _ffi.NULL:  # out of memory: keep the old
        for made in (fresh_into, fresh_out):
            if made != _ffi.NULL:
                _lib.BIO_free(made)
        return False
    _lib.SSL_set_bio(connection._ssl, fresh_into, fresh_out)  # frees the old two
    connection._into_ssl, connection._from_ssl = fresh_into, fresh_out
    return True


class Sweeper:
    """The engine's TLS connections, each released every `interval` seconds."""

    def __init__(self, interval: float = SWEEP_INTERVAL_S) -> None:
        self.interval = interval
        self.connections: weakref.WeakSet[SSL.Connection] = weakref.WeakSet()

    def add(self, connection: SSL.Connection) -> None:
        self.connections.add(connection)

    def sweep(self) -> int:
        """Release every connection kept; how many were released."""
        return sum(release(each) for each in list(self.connections))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sweep()
