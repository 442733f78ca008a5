"""Memory bounds on mitmproxy's protocol layers: heads, trailers, WebSocket messages.

mitmproxy 12 reads an HTTP/1 head with `ReceiveBuffer.maybe_extract_lines()` and has no
limit on it (`# FIXME: protect against header size DoS` in `_http1.py`); the same buffer
holds chunk-size lines and trailers, and what a client pipelines while it waits. A
WebSocket message is assembled whole, and every message is kept on the flow. So this
module wraps three methods of mitmproxy's layers, each wrapper calling the original and
then checking what it left behind (`install()`; tests/addons/test_limits.py fails if an
upgrade moves what they rely on):

* `Http1Connection._handle_event`: more than `HEAD_LIMIT` unparsed bytes (a head,
  a chunk line or trailers), or a request head unfinished after `HEAD_TIMEOUT_S`, ends
  the connection; the head's first byte asks mitmproxy for a wakeup, so the deadline
  holds for a client that goes silent too (issue 21). A client that has no request in
  flight gets a 431 (408 for the timeout) with `X-Egress-Denied: bad_request`;
  otherwise the message in flight fails as a protocol error, which mitmproxy answers
  with a 502 (upstream) or by closing.
  An upstream status line outside 100-599 or not HTTP/1.0/1.1, which mitmproxy would
  forward, is a 502 too. HTTP/1 trailers, which mitmproxy 12 does not implement (it
  raises and leaves the connection hung), are dropped.
* `HttpStream._handle_event`: records on the flow whether a body follows the request
  head (`body_follows`), which the policy needs to refuse an HTTP/2 stream readably
  only when that cannot mean buffering its body.
* `WebsocketLayer.relay_messages`: a message over `WEBSOCKET_MESSAGE_LIMIT` closes
  both sides with 1009. The `Limits` addon drops already forwarded messages, and
  removes `Sec-WebSocket-Extensions` (no compression, so no inflation bomb).

`addons.layers.backpressure` (installed from here too) holds upstreams back while an HTTP/2
client's send queue is full; `addons.layers.pushgate` (too) holds a git push's body until its
command list is judged.

HTTP/2 header lists are bounded by the h2 library itself (64 KiB decoded, 64
CONTINUATION frames); the test pins those defaults too. A connection closed for a
bound is reset shortly after (`_abort_later`), since mitmproxy may leave it open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import wsproto.events
from h11._receivebuffer import ReceiveBuffer
from mitmproxy import connection, http
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import websocket
from mitmproxy.proxy.layers.http import HttpStream, _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    HttpEvent,
    RequestHeaders,
    ResponseHeaders,
)
from mitmproxy.proxy.layers.http._hooks import HttpRequestHeadersHook
from wsproto.connection import ConnectionState

from sandbox_egress.addons import mitm
from sandbox_egress.addons.layers import backpressure, linger, pushgate
from sandbox_egress.addons.layers.workarounds import Commands, relay
from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy.decision import Reason, Stage
from sandbox_egress.proxy.limits import (
    HEAD_LIMIT,
    HEAD_TIMEOUT_S,
    WEBSOCKET_MESSAGE_LIMIT,
    Limit,
    head_refusal_body,
)
from sandbox_egress.proxy.metrics import ProxyMetrics

log = logging.getLogger("egress")

BODY_FOLLOWS = "egress.body_follows"  # flow.metadata key, set before `requestheaders`
_TRAILERS_RAISE = "HTTP trailers are not implemented yet."
_HEAD_SINCE = "_egress_head_since"
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
ABORT_GRACE_S = 0.5
WAKEUP_MARGIN_S = 0.5  # the head's timer fires this long after its deadline


def _ignore(_limit: Limit) -> None:
    pass


_report: Callable[[Limit], None] = _ignore
_original_http1 = _http1.Http1Connection._handle_event
_original_stream = HttpStream._handle_event
_original_websocket = websocket.WebsocketLayer.relay_messages


def body_follows(flow: http.HTTPFlow) -> bool:
    """Whether the request's head left its stream open (a body may follow, of any size)."""
    return bool(flow.metadata.get(BODY_FOLLOWS, True))


def install(report: Callable[[Limit], None]) -> None:
    """Wrap the layer methods (idempotent); `report` counts each refusal."""
    global _report
    _report = report
    _http1.Http1Connection._handle_event = _bounded_http1  # type: ignore[method-assign]
    HttpStream._handle_event = _marking_stream  # type: ignore[method-assign]
    websocket.WebsocketLayer.relay_messages = _bounded_websocket  # type: ignore[method-assign]
    backpressure.install()
    pushgate.install()  # after `_marking_stream`, which it wraps
    linger.install()  # after `pushgate`, which it wraps


# -- HTTP/1 -------------------------------------------------------------------------------------


def _bounded_http1(self: _http1.Http1Connection, event: events.Event) -> Commands:
    if isinstance(event, events.Wakeup):
        # The head's timer (mitmproxy's HTTP/1 layer asks for no wakeup of its own): the
        # deadline holds for a client that went silent, not only for one still sending.
        if isinstance(self, _http1.Http1Server) and _head_overdue(self):
            yield from _refuse(self, Limit.REQUEST_HEAD_TIMEOUT)
        return

    def instead(command: commands.Command) -> Commands | None:
        if _invalid_status(command):
            return _refuse(self, Limit.RESPONSE_HEAD, "invalid status line")
        return None

    try:
        if isinstance(self, _http1.Http1Server):
            # Only the upstream leg (`Http1Client`) reads a status line: the client leg's
            # commands go out as they come, one generator fewer per event (issue 36).
            yield from _original_http1(self, event)
            ended = True
        else:
            ended = yield from relay(_original_http1(self, event), instead, last=True)
    except NotImplementedError as exc:
        if str(exc) != _TRAILERS_RAISE:
            raise
        yield from _end_without_trailers(self)
        return
    if not ended:
        return
    if self.state == self.passthrough:
        return
    if self.state == self.done:
        if len(self.buf) > HEAD_LIMIT:  # mitmproxy still appends what arrives after the end
            self.buf = ReceiveBuffer()
        return
    # Sending never grows the receive buffer: an answer sent while this layer still parses
    # the request's head event (an early answer, D350) finds the body's bytes there.
    if len(self.buf) > HEAD_LIMIT and not isinstance(event, HttpEvent):
        server = isinstance(self, _http1.Http1Server)
        yield from _refuse(self, Limit.REQUEST_HEAD if server else Limit.RESPONSE_HEAD)
    elif isinstance(self, _http1.Http1Server):
        started = getattr(self, _HEAD_SINCE, None) is None
        if _head_overdue(self):
            yield from _refuse(self, Limit.REQUEST_HEAD_TIMEOUT)
        elif started and getattr(self, _HEAD_SINCE, None) is not None:
            yield commands.RequestWakeup(HEAD_TIMEOUT_S + WAKEUP_MARGIN_S)


def _head_overdue(conn: _http1.Http1Server) -> bool:
    """A request head started (bytes buffered, no request yet) longer ago than allowed.
    Its first byte starts the clock (and, in `_bounded_http1`, the head's timer)."""
    if conn.state != conn.read_headers or not conn.buf:
        setattr(conn, _HEAD_SINCE, None)
        return False
    since = getattr(conn, _HEAD_SINCE, None)
    now = time.monotonic()
    if since is None:
        setattr(conn, _HEAD_SINCE, now)
        return False
    return bool(now - since > HEAD_TIMEOUT_S)


def _invalid_status(command: commands.Command) -> bool:
    """Response headers whose status line mitmproxy parsed but RFC 9112 does not allow:
    a status outside 100-599, or a version other than HTTP/1.0 and HTTP/1.1."""
    if not (isinstance(command, ReceiveHttp) and isinstance(command.event, ResponseHeaders)):
        return False
    response = command.event.response
    return not (100 <= response.status_code <= 599 and response.http_version in _VERSIONS)


def _refuse(conn: _http1.Http1Connection, limit: Limit, why: str = "") -> Commands:
    if not why:
        _report(limit)
    conn.buf = ReceiveBuffer()  # what was read is dropped, not parsed
    in_flight = conn.stream_id is not None and conn.request is not None
    if isinstance(conn, _http1.Http1Server) and not in_flight:
        status = 408 if limit is Limit.REQUEST_HEAD_TIMEOUT else 431
        yield commands.SendData(conn.conn, _refusal(status, limit))
    yield commands.CloseConnection(conn.conn)
    _abort_later(conn.conn)
    if conn.stream_id is not None and (in_flight or isinstance(conn, _http1.Http1Client)):
        code = (
            ErrorCode.GENERIC_CLIENT_ERROR
            if isinstance(conn, _http1.Http1Server)
            else ErrorCode.GENERIC_SERVER_ERROR
        )
        message = why or f"{limit.value.replace('_', ' ')} over the proxy's bound"
        yield ReceiveHttp(conn.ReceiveProtocolError(conn.stream_id, message, code))
    conn.state = conn.done


def _abort_later(conn: connection.Connection) -> None:
    """Reset the socket of a connection closed for a bound, after a grace for the answer.

    mitmproxy cancels its reader when a layer closes the connection it is reading, and
    can then skip closing the socket (see `addons.egress._hang_up`): a peer still sending
    would block, unread, until its own timeout. The transport is looked up now, while
    mitmproxy still lists it, and aborted after `ABORT_GRACE_S` (a no-op if mitmproxy
    closed it meanwhile). If the connection table changes shape, nothing happens.
    """
    try:
        loop = asyncio.get_running_loop()
        server = mitm.addon("proxyserver")
        for handler in list(server.connections.values()):
            io = handler.transports.get(conn)
            if io is not None and io.writer is not None:
                loop.call_later(ABORT_GRACE_S, io.writer.transport.abort)
                return
    except (AttributeError, LookupError, RuntimeError):  # no loop: the layer tests
        log.debug("could not reset a connection closed for a bound", exc_info=True)


def _refusal(status: int, limit: Limit) -> bytes:
    response = http.Response.make(
        status,
        json.dumps(head_refusal_body(limit)).encode() + b"\n",
        {
            "Content-Type": "application/json",
            "X-Egress-Denied": "bad_request",
            "Connection": "close",
        },
    )
    return mitm.assemble_response(response)


def _end_without_trailers(conn: _http1.Http1Connection) -> Commands:
    """What mitmproxy does at the end of a chunked body, minus the trailers it cannot carry."""
    if conn.stream_id is None or conn.request is None:
        raise InvariantError("a chunked body ends inside a request")
    log.info("dropped HTTP/1 trailers (mitmproxy does not forward them)")
    if conn.request.data.method.upper() != b"CONNECT":
        yield ReceiveHttp(conn.ReceiveEndOfMessage(conn.stream_id))
    server = isinstance(conn, _http1.Http1Server)
    yield from conn.mark_done(request=server, response=not server)


# -- streams ------------------------------------------------------------------------------------


def _marking_stream(self: HttpStream, event: events.Event) -> Commands:
    inner = _original_stream(self, event)
    if not isinstance(event, RequestHeaders):
        yield from inner
        return

    def mark(command: commands.Command) -> None:
        if isinstance(command, HttpRequestHeadersHook):
            command.flow.metadata[BODY_FOLLOWS] = not event.end_stream

    yield from relay(inner, mark)


# -- WebSocket ----------------------------------------------------------------------------------


def _bounded_websocket(self: websocket.WebsocketLayer, event: events.Event) -> Commands:
    yield from _original_websocket(self, event)
    if self._handle_event == self.done:
        return
    for ws in (self.client_ws, self.server_ws):
        if sum(len(fragment) for fragment in ws.frame_buf) > WEBSOCKET_MESSAGE_LIMIT:
            yield from _close_too_big(self)
            return


def _close_too_big(layer: websocket.WebsocketLayer) -> Commands:
    _report(Limit.WEBSOCKET_MESSAGE)
    if layer.flow.websocket is None:
        raise InvariantError("a WebSocket layer has a WebSocket flow")
    layer.flow.websocket.close_code = 1009
    layer.flow.websocket.close_reason = "message too big"
    for ws in (layer.server_ws, layer.client_ws):
        ws.frame_buf = [b""]
        if ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            yield ws.send2(wsproto.events.CloseConnection(1009, "message too big"))
        yield commands.CloseConnection(ws.conn)
        _abort_later(ws.conn)
    layer._handle_event = layer.done
    yield websocket.WebsocketEndHook(layer.flow)
    layer.flow.live = False


class Limits:
    """The addon: installs the bounds, counts refusals, keeps no forwarded message."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics

    def load(self, _loader: object) -> None:
        install(self.count)

    def count(self, limit: Limit) -> None:
        self.metrics.limit_refusals.labels(limit.value).inc()
        if limit in (Limit.REQUEST_HEAD, Limit.REQUEST_HEAD_TIMEOUT):
            # A refused request like any other, though it never became a flow.
            self.metrics.count_decision(Stage.REQUEST, "deny", Reason.BAD_REQUEST)
        log.warning("refused by a memory bound: %s", limit.value)

    def client_disconnected(self, client: connection.Client) -> None:
        backpressure.forget(client.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        _no_websocket_compression(flow.request)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None and flow.response.status_code == 101:
            _no_websocket_compression(flow.response)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        # The layer holds the current message itself; the list needs nothing older.
        if flow.websocket is not None:
            del flow.websocket.messages[:-1]


def _no_websocket_compression(message: http.Message) -> None:
    """Offer and accept no WebSocket extension: wsproto inflates a compressed frame whole,
    so a small deflate bomb would bypass `WEBSOCKET_MESSAGE_LIMIT` in one read (D29)."""
    if message.headers.get("upgrade", "").lower() == "websocket":
        message.headers.pop("Sec-WebSocket-Extensions", None)
