"""A kept-alive HTTP/1.1 request's way to its stream and upstream below the layers, behind
`--fast-path`, off by default (issue 49, D610-D613).

A kept-alive GET inside an intercepted TLS tunnel crosses, on its way in, the client TLS
layer, the HTTP layer, `Http1Server` (which parses it), the HTTP layer again (which makes
the stream), the stream (its hooks), the HTTP layer (a connection, the request to send),
the upstream's TLS layer, `HttpClient`, `Http1Client` (which assembles the head) and the
upstream TLS layer again (which encrypts it): 18 layer passes per request (D610).

`install()` gives the client TLS layer an `event_to_child` that, for an eligible read
(`_parse`), does what those layers would do with it, in the same order, without their
passes: `Http1Server`'s parse (mitmproxy's own functions: the same refusals), its fields
set as its `read_headers` and `read_body` set them, the stream made and handed its
`RequestHeaders` and `RequestEndOfMessage` as the HTTP layer hands them (`_to_stream`, a
copy of `HttpLayer.event_to_child`), and `Http1Server.mark_done`. The stream itself runs
as before: mitmproxy's `HttpStream` with every wrapper of the product (limits, push gate,
lingering close, hooks in place), so the flow, the hooks, a refusal, a kill, an answer
set by a hook and a hook that waits are the stream's own. Below it, a request head sent
to an idle upstream `Http1Client` (`_upstream`) is assembled and encrypted as
`Http1Client.send` and the TLS layer's `send_data` do, with `Http1Client`'s fields set as
they set them; an existing upstream connection is handed to the stream as
`HttpLayer.get_connection` hands it. Anything else goes through the layers' own code
(mitmproxy's `event_to_child`, `get_connection`), from the state they would be in.

Eligible, else the layers whole: the connection is a `ClientTLSLayer` whose child is the
HTTP layer (regular or transparent) with `Http1Server` reading a head, nothing buffered,
at least one request done on it, no stream open, nothing paused or queued, no
`proxy_debug` logging; the read is
exactly one whole `GET` or `HEAD` head in origin form, under 16 KiB, no body, no
`Expect`, `Upgrade`, `Transfer-Encoding`, `TE`, `Content-Length`, no `Connection` but
`keep-alive`, which mitmproxy's parser and `expected_http_body_size` accept.
tests/runtime/test_fastpath.py compares the layers' state, the hooks' flows and the bytes
sent upstream with and without it, and pins the mitmproxy internals it copies.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from h11._receivebuffer import ReceiveBuffer
from mitmproxy import http as mhttp
from mitmproxy.net.http import http1
from mitmproxy.proxy import commands, events, tunnel
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _base, _events, _http1
from mitmproxy.proxy.mode_specs import ReverseMode

Commands = Generator[commands.Command, Any, None]

_below: Callable[[Any, events.Event], Commands] | None = None  # the event_to_child it wraps
taken = {"requests": 0, "upstream": 0}  # what the fast path carried, for the tests
MAX_HEAD = 16 * 1024
_METHODS = (b"GET ", b"HEAD ")
_REFUSED = ("expect", "upgrade", "transfer-encoding", "te", "content-length")
_MODES = (http.HTTPMode.regular, http.HTTPMode.transparent)
HEAD_SINCE = "_egress_head_since"  # addons/layers/limits.py's head timer, None when idle


def _http_layer(layer: tls.ClientTLSLayer) -> Any:
    child: Any = layer.child_layer
    if type(child) is NextLayer:
        if child._handle is None:  # not decided yet
            return None
        child = child.layer
    if type(child) is not http.HttpLayer or child.mode not in _MODES:
        return None
    return child


def _idle(each: Any) -> bool:
    return each._paused is None and not each._paused_event_queue


def _server(layer: tls.ClientTLSLayer, layers: Any) -> Any:
    """The client leg's `Http1Server` when it reads a kept-alive request's head afresh."""
    h1 = layers.connections.get(layer.conn)
    if (
        type(h1) is not _http1.Http1Server
        or h1.state != h1.read_headers
        or len(h1.buf)
        or h1.stream_id < 3  # a request before it was done on the layers
        or h1.request is not None
        or getattr(h1, HEAD_SINCE, None) is not None
        or layers.streams
        or layers.command_sources
        or layers.waiting_for_establishment
        or not _idle(layers)
        or not _idle(h1)
        or isinstance(layer.context.client.proxy_mode, ReverseMode)
        or layers.debug is not None  # `proxy_debug`: the layers' own logging of each pass
    ):
        return None
    return h1


def _parse(data: bytes) -> mhttp.Request | None:
    """The request of a read that is one whole plain GET or HEAD head, parsed as
    `Http1Server.read_headers` parses it; None for anything else (the layers take it)."""
    if (
        len(data) > MAX_HEAD
        or not data.startswith(_METHODS)
        or data.find(b"\r\n\r\n") != len(data) - 4
    ):
        return None
    buf = ReceiveBuffer()
    buf += data
    lines = buf.maybe_extract_lines()
    if not lines or len(buf):
        return None
    try:
        request = http1.read_request_head([bytes(x) for x in lines])
        if http1.expected_http_body_size(request) != 0:
            return None
    except ValueError:  # the layers refuse it, as they do
        return None
    if (
        request.data.authority
        or not request.data.path.startswith(b"/")
        or request.data.http_version != b"HTTP/1.1"
    ):
        return None
    headers = request.headers
    if any(name in headers for name in _REFUSED):
        return None
    if headers.get_all("connection") not in ([], ["keep-alive"]):
        return None
    return request


def _event_to_child(self: Any, event: events.Event) -> Commands:
    request = None
    if (  # the client's read: the upstream's pass through this layer too
        type(event) is events.DataReceived
        and type(self) is tls.ClientTLSLayer
        and event.connection is self.conn
    ):
        layers = _http_layer(self)
        h1 = _server(self, layers) if layers is not None else None
        if h1 is not None and self.tunnel_state is tunnel.TunnelState.OPEN:
            request = _parse(event.data)
    if request is None:
        if _below is None:  # pragma: no cover - only reachable through install()
            raise RuntimeError("the fast path is not installed")
        yield from _below(self, event)
        return
    taken["requests"] += 1
    for command in _request(layers, h1, request):
        yield from self._handle_command(command)  # TunnelLayer.event_to_child's loop


def _request(layers: Any, h1: Any, request: mhttp.Request) -> Commands:
    """What `HttpLayer.event_to_child(Http1Server, DataReceived)` does with the read."""
    stream_id = h1.stream_id
    h1.request = request  # Http1Server.read_headers, before it hands the head on
    yield from _received(layers, _events.RequestHeaders(stream_id, request, True))
    h1.body_reader = _http1.make_body_reader(0)
    h1.state = h1.read_body  # its read_body: an empty body ends at once
    yield from _received(layers, _events.RequestEndOfMessage(stream_id))
    yield from h1.mark_done(request=True)


def _received(layers: Any, event: Any) -> Commands:
    # HttpLayer.event_to_child's ReceiveHttp branch.
    if isinstance(event, _events.RequestHeaders):
        yield from layers.make_stream(event.stream_id)
    stream = layers.streams.get(event.stream_id)
    if stream is not None:
        yield from _to_stream(layers, stream, event)


def _to_stream(layers: Any, stream: Any, event: events.Event) -> Commands:
    """mitmproxy 12's `HttpLayer.event_to_child` for a stream, with a request sent to an
    idle upstream (`_upstream`) and a connection that is reused (`_reused`) handed on
    here rather than by the layers."""
    for command in stream.handle_event(event):
        if command.blocking or isinstance(command, commands.RequestWakeup):
            layers.command_sources[command] = stream
        if isinstance(command, _base.ReceiveHttp):
            yield from _received(layers, command.event)
        elif isinstance(command, http.SendHttp):
            top = layers.connections[command.connection]
            h1 = _client(top, command.event)
            if h1 is None:
                yield from layers.event_to_child(top, command.event)
            else:
                yield from _upstream(top, h1, command.event)
        elif isinstance(command, http.DropStream):
            layers.streams.pop(command.stream_id, None)
        elif isinstance(command, http.GetHttpConnection):
            reused = _reused(layers, command)
            if reused is None:
                yield from layers.get_connection(command)
            else:
                layers.command_sources.pop(command)
                completed = http.GetHttpConnectionCompleted(command, (reused, None))
                yield from _to_stream(layers, stream, completed)
        elif isinstance(command, http.RegisterHttpConnection):
            yield from layers.register_connection(command)
        elif isinstance(command, commands.OpenConnection):
            layers.connections[command.connection] = stream
            yield command
        else:
            yield command


def _reused(layers: Any, command: Any) -> Any:
    """The connection `HttpLayer.get_connection` would hand on at once, or None (then it
    runs itself)."""
    for connection in layers.connections:
        if command.connection_spec_matches(connection):
            if (
                connection in layers.waiting_for_establishment
                or connection.error
                or not connection.connected
                or (layers.context.client.alpn == b"h2" and connection.alpn != b"h2")
            ):
                return None
            return connection
    return None


def _client(top: Any, event: Any) -> Any:
    """The upstream's `Http1Client` when `event` is a plain request's head or end, sent to
    it idle below an open TLS layer with nothing paused; else None (the layers send it)."""
    if type(top) is not tls.ServerTLSLayer or top.tunnel_state is not tunnel.TunnelState.OPEN:
        return None
    below = getattr(top, "child_layer", None)
    h1 = getattr(below, "child_layer", None)
    if type(below) is not http.HttpClient or type(h1) is not _http1.Http1Client:
        return None
    if (
        not (_idle(top) and _idle(below) and _idle(h1))
        or h1.state != h1.read_headers
        or len(h1.buf)
    ):
        return None
    request: mhttp.Request | None
    if type(event) is _events.RequestHeaders:
        request = event.request
        if h1.stream_id is not None or not event.end_stream or request.is_http2 or request.is_http3:
            return None
    elif type(event) is _events.RequestEndOfMessage:
        request = h1.request
        if h1.stream_id != event.stream_id or request is None or h1.response is not None:
            return None
        try:
            if h1.response_done or http1.expected_http_body_size(request, None) == -1:
                return None  # mark_done would do more than note it, or a half-close is due
        except ValueError:
            return None
    else:
        return None
    if request is None or "chunked" in request.headers.get("transfer-encoding", "").lower():
        return None
    return h1


def _upstream(top: Any, h1: Any, event: Any) -> Commands:
    """`Http1Client.send` of a head or an end, its data encrypted by the TLS layer above."""
    if type(event) is _events.RequestHeaders:
        h1.stream_id, h1.request = event.stream_id, event.request
        taken["upstream"] += 1
        head = http1.assemble_request_head(event.request)  # type: ignore[no-untyped-call]
        yield from top.send_data(head)
    else:
        h1.request_done = True  # mark_done(request=True) with the response still to come


def install() -> None:
    """From now on client TLS layers take eligible kept-alive requests below the layers
    (idempotent). Only called with `--fast-path` (the row's switch in patches.py)."""
    global _below
    if tls.ClientTLSLayer.event_to_child is not _event_to_child:
        _below = tls.ClientTLSLayer.event_to_child
        tls.ClientTLSLayer.event_to_child = _event_to_child  # type: ignore[method-assign]
