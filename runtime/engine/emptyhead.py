"""Empty lines before a request line are skipped on a kept-alive connection too, not one
per read (RFC 9112 2.2; D672).

What it replaces: `Http1Server.read_headers`, which it calls again while the call before
took an empty line and left bytes. Why: mitmproxy's request reader asks h11's
`ReceiveBuffer.maybe_extract_lines` for a head; with an empty line (`\\r\\n` or `\\n`)
first, that takes the empty line and answers "no head" (`[]`), and mitmproxy then waits
for the next read. A request behind it in the same read (pipelined behind a body that a
client ended with a CRLF, or written as `\\r\\nGET ...` on a kept-alive connection) was
left in the buffer until the client wrote again: the sandbox's client hung. D336 skips
empty lines before a connection's first request only (before mitmproxy picks a layer).

Invariants: only `Http1Server` (a request's head); only after a call that left the reader
in `read_headers` with fewer bytes than before and some still buffered, so each further
call takes at least one byte (bounded by the buffer) and a head split across reads still
waits for its rest. The test that fails when mitmproxy changes under it:
tests/runtime/test_emptyhead.py::test_mitmproxy_waits_for_another_read_after_an_empty_line.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http import _http1

ORIGINAL_READ_HEADERS = _http1.Http1Server.read_headers


def _read_headers(self: Any, event: events.ConnectionEvent) -> Generator[Any, Any, None]:
    before = len(self.buf)
    yield from ORIGINAL_READ_HEADERS(self, event)
    while (
        isinstance(event, events.DataReceived)
        and self.state == self.read_headers
        and 0 < len(self.buf) < before
    ):
        before = len(self.buf)
        yield from ORIGINAL_READ_HEADERS(self, events.DataReceived(self.conn, b""))


def install() -> None:
    """From now on, every empty line before a request line in the buffer is skipped at
    once (idempotent)."""
    _http1.Http1Server.read_headers = _read_headers  # type: ignore[method-assign]
