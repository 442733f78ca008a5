"""A streamed HTTP/1.1 body relayed between the two TLS legs below mitmproxy's HTTP
layers, behind `--body-relay`, off by default (issue 49, D560-D564).

A streamed body crosses, per read, the reading leg's TLS layer, its HTTP/1 connection
layer (h11's receive buffer), the HTTP layer, the request's `HttpStream` (its stream
callable: the byte counter, the upload meter, the echo mask), the wrappers of the product
(limits, push gate, lingering close, hooks in place), the other leg's HTTP/1 layer and TLS
layer: each a generator pass and, in h11, a copy.

`install()` replaces `TLSLayer.receive_data` (over `runtime.engine.tlsread`'s) with one
that, once the reading leg is inside an eligible body (`_route`), decrypts the read as
tlsread does (one `bytes` per event), hands it to the stream's own callable (so the counts,
the upload meter and its cut, the mask of injected secrets are those of the normal path,
in the same order), and sends what the callable returned to the other leg: an upload is
encrypted by the upstream's TLS layer (`send_data`) right here, a download goes up as a
`SendData` that the client's TLS layer, above this one, encrypts on its way. Either way it
is one `SendData` on the other connection, written by the handler as before, so the
handler's `drain_writers` after the read still bounds what is queued (backpressure), and
the watchdog sees the same reads (timeouts). The HTTP/1 reader's count
(`ContentLengthReader._remaining`) is lowered by what was relayed; while a download is
relayed, its upstream leg reads `bulkio.READ_SIZE` at a time (no h11 buffer, D564).

Eligible (`_route`), checked per read, else mitmproxy's path: both legs TLS and HTTP/1.1;
the reading layer in `read_body` with nothing buffered, of a `Content-Length` body with
more than one byte left or of a chunked body before its trailers; the stream in
`state_stream_{request,response}_body`, not paused and with nothing queued;
`store_streamed_bodies` off; the flow not killed. A `Content-Length` body's last byte and
a chunked body's last chunk always take mitmproxy's path, so the end of the message, the
`request`/`response` hooks, trailers and the audit line are as before. A chunked body is
read by `relaychunks.take` from h11's own reader state, stricter than h11 (anything it
would not accept whole is left to the layers), and a message sent on in chunks is framed
per piece as mitmproxy's HTTP/1 layer frames it (D605).
A held push, an MCP or model-API body, a SigV4 hold, a refused request: none of them is in
a streaming state, so none is relayed (D561).

HTTP/2: with both legs HTTP/2, a download is `runtime.engine.relayh2`'s and an upload
`runtime.engine.relayh2up`'s (`_H2`: `route` before the read is decrypted, `relay` after),
dispatched from `_receive_data` (D575, D653).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from h11._readers import ChunkedReader, ContentLengthReader
from mitmproxy import connection
from mitmproxy.proxy import commands, events, tunnel
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http1

from sandbox_egress.runtime.engine import bulkio, relaychunks, relayh2, relayh2up, tlsread

Commands = Generator[commands.Command, Any, None]

_below: Callable[[Any, bytes], Commands] | None = None  # the receive_data it wraps
relayed = {"events": 0, "bytes": 0}  # what the relay carried, for the tests and /status
# The HTTP/2 variants, each `route(layer) -> legs | None` and `relay(layer, legs, plaintext)`
# (the bytes relayed): a download read on the upstream's leg, an upload on the client's.
_H2: tuple[Any, ...] = (relayh2, relayh2up)


@dataclass(frozen=True, slots=True)
class Route:
    reader: ContentLengthReader | ChunkedReader  # the reading leg's body reader
    callable: Callable[[bytes], Iterable[bytes] | bytes] | None  # the stream's, or None
    flow: Any
    out: tls.TLSLayer  # the other leg's TLS layer
    above: bool  # whether `out` is above the reading leg (a download), so it encrypts
    chunked: bool  # whether the message is sent on in chunks (framed as mitmproxy does)


def _http_layer(layer: tls.TLSLayer) -> Any:
    for each in reversed(layer.context.layers):
        if type(each) is http.HttpLayer:
            return each
    return None


def _reading(layer: tls.TLSLayer) -> tuple[Any, Any, Any] | None:
    """(the HTTP layer, the reading leg's HTTP/1 layer, the stream) when the leg is inside
    a `Content-Length` body with nothing buffered, more than its last byte to come, and
    the stream is not paused nor killed."""
    child: Any = layer.child_layer
    if type(child) is NextLayer:  # a client leg's HTTP layer, decided after the handshake
        child = child.layer
    h1: Any
    if type(layer) is tls.ServerTLSLayer:
        layers, h1 = _http_layer(layer), getattr(child, "child_layer", None)
        if type(h1) is not _http1.Http1Client or layers is None:
            return None
    elif type(layer) is tls.ClientTLSLayer and type(child) is http.HttpLayer:
        layers, h1 = child, child.connections.get(layer.conn)
        if type(h1) is not _http1.Http1Server:
            return None
    else:
        return None
    reader = getattr(h1, "body_reader", None)
    if h1.state != h1.read_body or len(h1.buf):
        return None
    if type(reader) is ContentLengthReader:
        if reader._remaining <= 1:  # the last byte: the layers'
            return None
    elif type(reader) is not ChunkedReader or reader._reading_trailer:
        return None
    stream = layers.streams.get(h1.stream_id)
    if stream is None or stream._paused is not None or stream.__dict__.get("_paused_event_queue"):
        return None
    if stream.flow.error is not None:
        return None
    return layers, h1, stream


def _other_leg(layer: tls.TLSLayer, layers: Any, stream: Any, download: bool) -> Any:
    """(the other leg's TLS layer, its HTTP/1 layer, the message sent on) when the stream
    is streaming that way, else None."""
    flow = stream.flow
    if download:  # the answer goes to the client, whose TLS layer is above
        if stream.server_state != stream.state_stream_response_body or flow.response is None:
            return None
        client = layer.context.client
        out = next((x for x in layer.context.layers if _client_tls(x, client)), None)
        out_h1, message = layers.connections.get(client), flow.response
        wanted: type = _http1.Http1Server
    else:  # the body goes upstream, whose TLS layer is below the HTTP layer
        if stream.client_state != stream.state_stream_request_body:
            return None
        top = layers.connections.get(flow.server_conn)
        out = top if type(top) is tls.ServerTLSLayer else None
        out_h1 = getattr(getattr(out, "child_layer", None), "child_layer", None)
        message, wanted = flow.request, _http1.Http1Client
    if out is None or type(out_h1) is not wanted:
        return None
    return out, out_h1, message


def _client_tls(layer: Any, conn: connection.Connection) -> bool:
    return type(layer) is tls.ClientTLSLayer and layer.conn is conn


def _route(layer: tls.TLSLayer) -> Route | None:
    """Where this read's plaintext may go below the layers, or None (mitmproxy's path)."""
    if layer.context.options.store_streamed_bodies:
        return None
    reading = _reading(layer)
    if reading is None:
        return None
    layers, h1, stream = reading
    download = type(h1) is _http1.Http1Client
    other = _other_leg(layer, layers, stream, download)
    if other is None:
        return None
    out, out_h1, message = other
    if (
        out.tunnel_state is not tunnel.TunnelState.OPEN
        or out_h1.stream_id != h1.stream_id
        or not (out.conn.state & connection.ConnectionState.CAN_WRITE)
        or message.stream is False
    ):
        return None
    stream_callable = message.stream if callable(message.stream) else None
    chunked = "chunked" in message.headers.get("transfer-encoding", "").lower()
    return Route(h1.body_reader, stream_callable, stream.flow, out, download, chunked)


def _h2_route(layer: tls.TLSLayer) -> tuple[Any, Any] | None:
    """(the HTTP/2 variant, its legs) that may relay this leg's reads, or None."""
    for variant in _H2:
        legs = variant.route(layer)
        if legs is not None:
            return variant, legs
    return None


def _receive_data(self: Any, data: bytes) -> Commands:
    route = _route(self) if data else None
    h2 = _h2_route(self) if data and route is None else None  # HTTP/2 (D575, D653)
    if type(self) is tls.ServerTLSLayer:  # a download's upstream reads wider while relayed
        if route is None:
            bulkio.relaying.discard(self.conn)
        else:
            bulkio.relaying.add(self.conn)
    if route is None and h2 is None:
        if _below is None:  # pragma: no cover - only reachable through install()
            raise RuntimeError("the body relay is not installed")
        yield from _below(self, data)
        return
    self.tls.bio_write(data)
    plaintext, close, error = tlsread._plaintext(self.tls, len(data))
    if error is not None:
        yield commands.Log(f"TLS Error: {error}", logging.WARNING)
    yield from self.tls_interact()

    if h2 is not None:
        if plaintext:
            variant, legs = h2
            sent = yield from variant.relay(self, legs, plaintext)
            if sent:
                relayed["events"] += 1
                relayed["bytes"] += sent
        plaintext = b""
    elif route is not None:
        reader = route.reader
        if type(reader) is ContentLengthReader:
            take = min(len(plaintext), reader._remaining - 1)  # the last byte: the layers'
            if take > 0:
                part = plaintext if take == len(plaintext) else plaintext[:take]
                plaintext = plaintext[take:]
                reader._remaining -= take
                yield from _relay(route, part)
        elif type(reader) is ChunkedReader:  # whole chunks and parts; the last: the layers'
            taken = relaychunks.take(plaintext, reader._bytes_in_chunk, reader._bytes_to_discard)
            reader._bytes_in_chunk, reader._bytes_to_discard = taken.in_chunk, taken.to_discard
            plaintext = plaintext[taken.stop :] if taken.stop else plaintext
            for piece in taken.pieces:
                yield from _relay(route, piece)
    if plaintext:
        yield from self.event_to_child(events.DataReceived(self.conn, plaintext))
    if close:  # tlsread's (mitmproxy's) handling of a close_notify
        self.conn.state &= ~connection.ConnectionState.CAN_READ
        if self.debug:
            yield commands.Log(f"{self.debug}[tls] close_notify {self.conn}", logging.DEBUG)
        yield from self.event_to_child(events.ConnectionClosed(self.conn))


def _relay(route: Route, part: bytes) -> Commands:
    """`part` through the stream's callable (count, meter, mask), into the other leg."""
    out = route.callable(part) if route.callable is not None else part
    chunks = (out,) if isinstance(out, bytes) else out
    sent = 0
    for chunk in chunks:
        if not chunk:
            continue
        sent += len(chunk)
        if route.chunked:
            chunk = relaychunks.frame(chunk)
        if route.above:  # the client's TLS layer is above the reading leg: it encrypts
            yield commands.SendData(route.out.conn, chunk)
        else:  # the server's TLS layer is below: encrypt as its `send_data` does
            yield from route.out.send_data(chunk)
    relayed["events"] += 1
    relayed["bytes"] += sent


def install() -> None:
    """From now on TLS layers relay eligible HTTP/1.1 bodies (idempotent). Only called
    with `--body-relay` (the row's switch in runtime/engine/patches.py)."""
    global _below
    if tls.TLSLayer.receive_data is not _receive_data:
        _below = tls.TLSLayer.receive_data
        tls.TLSLayer.receive_data = _receive_data  # type: ignore[method-assign]
