"""An upstream's graceful GOAWAY lets the streams it names finish (RFC 9113 6.8, D701).

What it replaces: h2's `H2Connection._receive_goaway_frame` on a client-side connection,
`Http2Client.handle_h2_event`, `_handle_event` and `close_connection`, and
`GetHttpConnection.connection_spec_matches`. Why: an HTTP/2 server that stops taking new
streams says so with a GOAWAY naming the last stream it will still answer: nginx does it
after `keepalive_requests` (1000 by default) requests on a connection, a load balancer
when it drains. h2 moves its connection to CLOSED on any GOAWAY, after which it refuses
every frame (python-hyper/h2#1181), and mitmproxy's `Http2Client` answers it by failing
every stream. So the request that filled the connection's quota, which the upstream was
answering, got a `502`: one request in every thousand through one client connection to
an nginx.

What this does, on a GOAWAY without an error (`NO_ERROR`) from an upstream:
* h2 keeps the connection open for the streams it has (its state machine is not moved);
* the streams above the named one, which the upstream says it never processed, fail
  with `UNPROCESSED` (`proxy.failures.send_again` sends a held request once more, on a
  new connection: RFC 9113 8.7's "can be retried");
* the connection takes no new request (`connection_spec_matches` is false for it, so
  the HTTP layer opens another), and once its last stream has ended on a read, the proxy
  closes it; a stream it was given before the GOAWAY came, sent after it (so above the
  named one and never answered), fails with `UNPROCESSED` when the connection closes;
  the requests mitmproxy queued behind the upstream's SETTINGS_MAX_CONCURRENT_STREAMS
  fail with `UNPROCESSED` at the GOAWAY, never sent on it (D710);
* a later GOAWAY may lower the named stream, never raise it; one with an error code is
  mitmproxy's: every stream left fails (D711).
A stream the upstream resets with `REFUSED_STREAM` (RFC 9113 8.7: not processed, e.g. over
its concurrency limit) fails with `UNPROCESSED` too. A GOAWAY with an error code is
mitmproxy's as before: every stream fails.
The tests that fail when h2 or mitmproxy change under it:
tests/runtime/test_goaway.py::test_h2_and_mitmproxy_fail_the_stream_a_graceful_goaway_names.
"""

from __future__ import annotations

import weakref
from collections.abc import Generator
from typing import Any

import h2.connection
import h2.errors
import h2.events
from mitmproxy.connection import Connection
from mitmproxy.proxy import events
from mitmproxy.proxy.layers import http as http_layers
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import ErrorCode, ResponseProtocolError

from sandbox_egress.proxy.failures import UNPROCESSED

ORIGINAL_RECEIVE_GOAWAY = h2.connection.H2Connection._receive_goaway_frame
ORIGINAL_HANDLE_H2_EVENT = _http2.Http2Client.handle_h2_event
ORIGINAL_HANDLE_EVENT = _http2.Http2Client._handle_event
ORIGINAL_CLOSE = _http2.Http2Client.close_connection
ORIGINAL_SPEC_MATCHES = http_layers.GetHttpConnection.connection_spec_matches
LAST = "_egress_goaway_last"  # the stream the GOAWAY named: on the h2 connection and the layer
DRAINED = "HTTP/2 connection drained after the upstream's GOAWAY"
UNSENT = "_egress_goaway_unsent"  # on the layer: the client's streams queued at the GOAWAY

# Upstream connections a graceful GOAWAY came on: no new request goes on them.
_draining: weakref.WeakSet[Connection] = weakref.WeakSet()


def _receive_goaway_frame(self: Any, frame: Any) -> tuple[list[Any], list[Any]]:
    if not self.config.client_side or frame.error_code != h2.errors.ErrorCodes.NO_ERROR:
        return ORIGINAL_RECEIVE_GOAWAY(self, frame)
    # The last id may only go down (RFC 9113 6.8): one going up names no stream again.
    self.__dict__[LAST] = min(frame.last_stream_id, self.__dict__.get(LAST, frame.last_stream_id))
    terminated = h2.events.ConnectionTerminated()
    terminated.error_code = h2.errors.ErrorCodes.NO_ERROR
    terminated.last_stream_id = frame.last_stream_id
    terminated.additional_data = frame.additional_data or None
    return [], [terminated]


def _unprocessed(self: Any, streams: list[int]) -> Generator[Any, Any, None]:
    for stream_id in streams:
        self.streams.pop(stream_id, None)
        # The HTTP layer's stream may send its request again on this connection (after a
        # REFUSED_STREAM it stays open): on a new h2 stream, not on the closed one. The
        # reverse map stays, for `_handle_event` to name the stream of the error below.
        self.our_stream_id.pop(self.their_stream_id.get(stream_id), None)
        error = ResponseProtocolError(stream_id, UNPROCESSED, ErrorCode.GENERIC_SERVER_ERROR)
        yield ReceiveHttp(error)


def _handle_h2_event(self: Any, event: Any) -> Generator[Any, Any, bool]:
    if (
        isinstance(event, h2.events.StreamReset)
        and event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        and event.stream_id in self.streams
    ):  # refused before any processing (RFC 9113 8.7): as a stream above a GOAWAY's
        yield from _unprocessed(self, [event.stream_id])
        return False
    if not (
        isinstance(event, h2.events.ConnectionTerminated)
        # A GOAWAY with an error after a graceful one: mitmproxy's (D711).
        and event.error_code == h2.errors.ErrorCodes.NO_ERROR
        and LAST in self.h2_conn.__dict__
    ):
        return (yield from ORIGINAL_HANDLE_H2_EVENT(self, event))
    last = self.h2_conn.__dict__[LAST]
    self.__dict__[LAST] = last
    _draining.add(self.conn)
    yield from _unprocessed(self, sorted(s for s in self.streams if s > last))
    # The requests queued behind the upstream's stream limit never go on this connection
    # (mitmproxy would send them as its streams end): they fail as unprocessed once this
    # read is handled, by the client's stream id (`_handle_event`, D710).
    self.__dict__.setdefault(UNSENT, []).extend(self.stream_queue)
    self.stream_queue.clear()
    if not self.streams and not self.stream_queue:
        yield from self.close_connection(DRAINED)
        return True
    return False


def _handle_event(self: Any, event: events.Event) -> Generator[Any, Any, None]:
    yield from ORIGINAL_HANDLE_EVENT(self, event)
    # Outside mitmproxy's method: its stream id mapping is for streams that went out.
    for stream_id in self.__dict__.pop(UNSENT, ()):
        yield ReceiveHttp(
            ResponseProtocolError(stream_id, UNPROCESSED, ErrorCode.GENERIC_SERVER_ERROR)
        )
    if (
        LAST in self.__dict__
        and isinstance(event, events.DataReceived)  # a read: never inside a stream's send
        and "_handle_event" not in self.__dict__  # not closed already (mitmproxy's `done`)
        and not self.streams
        and not self.stream_queue
    ):
        yield from self.close_connection(DRAINED)


def close_connection(self: Any, msg: str) -> Generator[Any, Any, None]:
    last = self.__dict__.get(LAST)
    if last is not None:  # what went out after the GOAWAY was never processed
        yield from _unprocessed(self, sorted(s for s in self.streams if s > last))
    yield from ORIGINAL_CLOSE(self, msg)


def connection_spec_matches(self: Any, connection: Connection) -> bool:
    return connection not in _draining and ORIGINAL_SPEC_MATCHES(self, connection)


def install() -> None:
    """From now on, an upstream's graceful GOAWAY drains its connection (idempotent)."""
    h2.connection.H2Connection._receive_goaway_frame = _receive_goaway_frame  # type: ignore[method-assign]
    _http2.Http2Client.handle_h2_event = _handle_h2_event  # type: ignore[method-assign]
    _http2.Http2Client._handle_event = _handle_event  # type: ignore[method-assign]
    _http2.Http2Client.close_connection = close_connection  # type: ignore[method-assign]
    setattr(http_layers.GetHttpConnection, "connection_spec_matches", connection_spec_matches)  # noqa: B010 (a dataclass: mypy types the method as a field)
