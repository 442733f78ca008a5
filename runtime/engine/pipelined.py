"""A request pipelined on a kept-alive upstream connection waits until the connection's
HTTP/1 client has finished the request before it (D670).

What it replaces: `Http1Client.send`, and adds `Http1Client.mark_done` (mitmproxy's
`Http1Connection.mark_done` called first). Why: when the upstream's answer ends,
mitmproxy's `Http1Client` hands `ResponseEndOfMessage` on *before* it marks itself done.
Handing it on finishes the client-side flow, and `Http1Server` at once reads the next
request the sandbox had pipelined behind it. That request gets the same upstream
connection (still open, still idle in the `HttpLayer`'s view), and its events reach the
`Http1Client` re-entrantly, while it still holds the first request. mitmproxy's check
for this is an `assert` (`self.stream_id == event.stream_id`); under `python -O` (D75)
the check is gone. The second request was then sent with the first request's framing:
* a GET after a chunked POST got the POST's `0\\r\\n\\r\\n` after its head;
* a body of a length after a chunked request went out as a chunk. The upstream read
  that body's tail as a request of its own, which the policy never saw.
With the check on, the pipelined request failed instead.

What this does: an event of another stream than the one the client holds is kept, and
handed to `send` once `mark_done` has finished the held one. If the connection ends there
(`Connection: close`, a body read to the close), the kept request is answered with the
error of a server that closed first (a 502 page). If it becomes a pipe (an upgrade), the
kept request is answered the same way; and so it is when the proxy closed the connection
while finishing the held exchange (bytes after the answer's end: mitmproxy's "Unexpected
data from server", D671), so that nothing goes out on a connection after its close. The
test that fails when mitmproxy changes under it:
tests/runtime/test_pipelined.py::test_mitmproxy_hands_the_next_request_on_before_it_is_done.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from mitmproxy.connection import ConnectionState
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import ErrorCode, HttpEvent, ResponseProtocolError

ORIGINAL_SEND = _http1.Http1Client.send
ORIGINAL_MARK_DONE = _http1.Http1Connection.mark_done
KEPT = "_egress_kept"  # the instance attribute holding the kept events, only while some are
CLOSED_FIRST = "Server closed the connection before a pipelined request could be sent."


def _send(self: Any, event: HttpEvent) -> Generator[Any, Any, None]:
    if self.stream_id is not None and event.stream_id != self.stream_id:
        self.__dict__.setdefault(KEPT, []).append(event)
        return
    yield from ORIGINAL_SEND(self, event)


def _mark_done(
    self: Any, *, request: bool = False, response: bool = False
) -> Generator[Any, Any, None]:
    yield from ORIGINAL_MARK_DONE(self, request=request, response=response)
    kept: list[HttpEvent] | None = self.__dict__.get(KEPT)
    if not kept:
        return
    if (
        self.state == self.done
        or self.state == self.passthrough
        or not self.conn.state & ConnectionState.CAN_WRITE
    ):  # the held exchange ended the connection, made it a pipe, or the proxy closed it
        del self.__dict__[KEPT]
        for stream_id in dict.fromkeys(e.stream_id for e in kept):
            error = ResponseProtocolError(stream_id, CLOSED_FIRST, ErrorCode.GENERIC_SERVER_ERROR)
            yield ReceiveHttp(error)
        return
    while kept and self.stream_id is None:  # free: the kept events go out in their order
        yield from self.send(kept.pop(0))
        while kept and kept[0].stream_id == self.stream_id:
            yield from self.send(kept.pop(0))
    if not kept:
        self.__dict__.pop(KEPT, None)


def install() -> None:
    """From now on, a pipelined request waits for the upstream connection's client to
    finish the one before it (idempotent)."""
    _http1.Http1Client.send = _send  # type: ignore[method-assign]
    _http1.Http1Client.mark_done = _mark_done  # type: ignore[method-assign]
