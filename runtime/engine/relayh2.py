"""An HTTP/2 download's DATA relayed from the upstream's stream to the client's below
mitmproxy's HTTP layers, behind `--body-relay` (issue 49, D575-D579).

The HTTP/2 half of `runtime.engine.relay` (which dispatches here, `route`/`relay`): both
legs HTTP/2, a response streaming from the upstream to the client. Per upstream read,
mitmproxy takes the DATA through the upstream's `Http2Client`, the HTTP layer, the
request's `HttpStream` and the product's wrappers around it, the client's `Http2Server`
and its backpressure watch (addons/layers/backpressure.py). Here, once the read is
decrypted, when it is nothing but complete DATA frames of one stream without flags (after
what an earlier read left of a frame, `h2frames`'s `_pending_frames`):

* the upstream's h2 connection still receives them (joined by `h2frames.coalesce`, as
  mitmproxy's path joins them, D318): its state machines, windows and content-length
  count are h2's own, and the credit is given back as mitmproxy gives it
  (`acknowledge_received_data` per event; the WINDOW_UPDATEs encrypted to the upstream);
* their payload goes through the stream's own callable (counter, meter, echo mask), in
  the order mitmproxy calls it, and what it returns goes into the client's h2 connection
  (`send_data`, mitmproxy's, framed by `h2frames`), then encrypted by the client's TLS
  layer's `send_data`: the client offered ALPN, so mitmproxy connected upstream first and
  the client's TLS layer is the child of the upstream's (`route`).

Relayed only when (checked per read, else the read goes to mitmproxy's path unchanged):
the frames are complete DATA of one stream, unpadded, without flags (END_STREAM, so the
end of the message, trailers, hooks and audit, is always mitmproxy's); nothing is left in
h2's own frame buffer; the upstream's h2 stream is open for receiving with the window and
content length for all of it; the `HttpStream` streams its response (not paused, nothing
queued, the flow not killed, `store_streamed_bodies` off); the client's h2 stream is open
for us, has nothing queued and a window that takes all of it (when it does not, mitmproxy
buffers as before, and its backpressure watch sees the queue).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

import h2.events
import h2.stream
from mitmproxy import connection
from mitmproxy.proxy import commands, events, tunnel
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http2

from sandbox_egress.runtime.engine import h2data, h2frames

Commands = Generator[commands.Command, Any, int]

_HEADER = 9
_FIELDS = struct.Struct(">HBBBL")  # length's high 16 bits, its low 8, type, flags, stream
_RECEIVING = (h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_LOCAL)


@dataclass(frozen=True, slots=True)
class Legs:
    upstream: _http2.Http2Client
    client: _http2.Http2Server
    layers: Any  # the HttpLayer
    out: tls.TLSLayer  # the client's TLS layer, below the upstream's: it encrypts here


def route(layer: tls.TLSLayer) -> Legs | None:
    """The two HTTP/2 legs when `layer` is an upstream's TLS leg that may carry a relayed
    download (the frames decide per read, `relay`), else None.

    The client offered ALPN, so mitmproxy opened the upstream first (to offer the client
    what the upstream chose): the upstream's TLS layer is above the client's, whose
    NextLayer holds the HTTP layer, whose table has both HTTP/2 connections."""
    if type(layer) is not tls.ServerTLSLayer or layer.context.options.store_streamed_bodies:
        return None
    out: Any = layer.child_layer
    if type(out) is not tls.ClientTLSLayer:
        return None
    layers: Any = out.child_layer
    if type(layers) is NextLayer:
        layers = layers.layer
    if type(layers) is not http.HttpLayer:
        return None
    upstream = layers.connections.get(layer.conn)
    server = layers.connections.get(out.conn)
    if (
        type(upstream) is not _http2.Http2Client
        or type(server) is not _http2.Http2Server
        or out.tunnel_state is not tunnel.TunnelState.OPEN
        or not (out.conn.state & connection.ConnectionState.CAN_WRITE)
    ):
        return None
    return Legs(upstream, server, layers, out)


def data_frames(buffer: bytes | bytearray) -> tuple[int, int, int] | None:
    """(the stream, where the complete frames end, their payload) when the complete
    frames at the head of `buffer` are one or more DATA frames of one stream with no flags,
    else None. An incomplete frame at the end is not looked at."""
    size, at, payload, sid = len(buffer), 0, 0, 0
    while size - at >= _HEADER:
        high, low, kind, flags, stream = _FIELDS.unpack_from(buffer, at)
        length = high << 8 | low
        if at + _HEADER + length > size:
            break
        if kind or flags or not stream & 0x7FFFFFFF or (sid and stream != sid):
            return None
        sid = stream
        payload += length
        at += _HEADER + length
    return (sid, at, payload) if at else None


def _streaming(legs: Legs, sid: int, payload: int) -> tuple[Any, int] | None:
    """(the HttpStream, the client's stream id) when `payload` bytes of upstream stream
    `sid` may be relayed now (module doc), else None."""
    upstream, h2c = legs.upstream, legs.upstream.h2_conn
    theirs = upstream.their_stream_id.get(sid)
    stream = legs.layers.streams.get(theirs) if theirs is not None else None
    if stream is None or upstream.streams.get(sid) is not _http2.StreamState.HEADERS_RECEIVED:
        return None
    flow = stream.flow
    if (
        stream.server_state != stream.state_stream_response_body
        or flow.response is None
        or flow.response.stream is False
        or flow.error is not None
        or stream._paused is not None
        or stream.__dict__.get("_paused_event_queue")
    ):
        return None
    h2s = h2c.streams.get(sid)
    if (
        h2s is None
        or h2s.state_machine.state not in _RECEIVING
        or h2c.remote_flow_control_window(sid) < payload
        or (
            h2s._expected_content_length is not None
            and h2s._actual_content_length + payload > h2s._expected_content_length
        )
    ):
        return None
    cid, down = stream.stream_id, legs.client.h2_conn
    if (
        not legs.client.is_open_for_us(cid)
        or down.stream_buffers.get(cid)
        or down.local_flow_control_window(cid) < payload
    ):
        return None
    return stream, cid


def relay(layer: tls.TLSLayer, legs: Legs, plaintext: bytes) -> Commands:
    """The decrypted read relayed when it may be (module doc), else handed to the layers
    as mitmproxy would; returns the bytes relayed to the client (0 when not)."""
    h2c = legs.upstream.h2_conn
    pending: bytearray | None = h2c.__dict__.get("_pending_frames")
    whole = bytearray(pending) if pending else bytearray()
    whole += plaintext  # the one copy mitmproxy's path makes too (h2data, D318)
    found = data_frames(whole) if not h2c.incoming_buffer._data else None
    streaming = _streaming(legs, found[0], found[2]) if found is not None else None
    if found is None or streaming is None:
        yield from layer.event_to_child(events.DataReceived(layer.conn, plaintext))
        return 0
    sid = found[0]
    stream, cid = streaming
    joined = h2frames.coalesce(whole, h2c.max_inbound_frame_size)  # `whole` keeps the tail
    h2c.__dict__["_pending_frames"] = whole
    # `_streaming` checked all h2 checks of DATA (stream state, windows, content length,
    # frame size): an error here is a bug, and the layers' exception closes both legs.
    received = h2data.ORIGINAL_RECEIVE_DATA(h2c, joined)
    legs.upstream.last_activity = time.time()
    pieces: list[bytes] = []
    for event in received:  # DATA of `sid` only: the frames said so
        if type(event) is h2.events.DataReceived:
            pieces.append(event.data)
            h2c.acknowledge_received_data(event.flow_controlled_length, sid)
    credit = h2c.data_to_send()
    if credit:
        yield from layer.send_data(credit)
    data = b"".join(pieces) if len(pieces) != 1 else pieces[0]
    sent = _to_client(legs, stream, cid, data)
    out = legs.client.h2_conn.data_to_send()
    if out:
        yield from legs.out.send_data(out)  # the client's TLS layer encrypts it
    return sent


def _to_client(legs: Legs, stream: Any, cid: int, data: bytes) -> int:
    """`data` through the stream's callable into the client's h2 stream, as
    `HttpStream.state_stream_response_body` and `Http2Connection` do."""
    message = stream.flow.response
    call: Callable[[bytes], Iterable[bytes] | bytes] | None = (
        message.stream if callable(message.stream) else None
    )
    out = call(data) if call is not None else data
    chunks = (out,) if isinstance(out, bytes) else out
    sent = 0
    for chunk in chunks:
        if legs.client.is_open_for_us(cid):
            legs.client.h2_conn.send_data(cid, chunk)
            sent += len(chunk)
    return sent
