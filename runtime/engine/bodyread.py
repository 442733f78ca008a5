"""A request body of known length handed on as it arrived, not copied three more times
(issue 36, D303).

mitmproxy's HTTP/1 layer appends every `DataReceived` to its receive buffer (h11's
`ReceiveBuffer`), and h11's `ContentLengthReader` takes the body out of it with two
slices (`maybe_extract_at_most` copies once to see whether anything is there, then once
to extract) before mitmproxy turns that `bytearray` back into `bytes`: each 256 KiB read
of an upload was copied three times after the append.

`install()` replaces `Http1Connection.read_body` for a request (`Http1Server`): while a
`Content-Length` body is read and the receive buffer holds exactly the event's bytes (it
was empty before them) and all of them belong to the body, the event's own `bytes` object
is the body chunk and the buffer is emptied. Anything else — a response, chunked and
read-until-close bodies, bytes left over from before, a body that ends inside the event
(a pipelined request follows), the body's end — takes mitmproxy's own path, which still
sees the count h11's reader keeps. What the layer hands on is the same
(tests/runtime/test_bodyread.py: a property over splits of pipelined requests); only the
copies go. `addons.layers.limits` wraps `Http1Connection._handle_event`, which calls this through
the layer's state, so its bounds hold as before.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from h11._readers import ContentLengthReader
from h11._receivebuffer import ReceiveBuffer
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestData

ORIGINAL_READ_BODY = _http1.Http1Connection.read_body


def _read_body(self: Any, event: events.Event) -> Generator[Any, Any, None]:
    reader = self.body_reader
    if (
        type(event) is events.DataReceived
        and type(reader) is ContentLengthReader
        and type(self) is _http1.Http1Server
        and 0 < len(event.data) <= reader._remaining
        and len(self.buf) == len(event.data)
    ):
        self.buf = ReceiveBuffer()
        reader._remaining -= len(event.data)
        yield ReceiveHttp(RequestData(self.stream_id, event.data))
        if reader._remaining:
            return
    yield from ORIGINAL_READ_BODY(self, event)  # the end of the body, or mitmproxy's case


def install() -> None:
    """From now on, a request body of known length is handed on without copies
    (idempotent)."""
    _http1.Http1Connection.read_body = _read_body  # type: ignore[method-assign]
