"""An HTTP/2 upload's DATA relayed from the client's stream to the upstream's below
mitmproxy's HTTP layers, behind `--body-relay` (issue 49, D653-D657).

`runtime.engine.relayh2`'s other direction, one variant of `relay.py`'s HTTP/2 table
(`route` before the read is decrypted, `relay` after): both legs HTTP/2, a request body
streaming from the client to the upstream. Per client read, mitmproxy takes the DATA
through the client's `Http2Server`, the HTTP layer, the request's `HttpStream` (its
stream callable: the byte counter, the upload meter and its cut) and the product's
wrappers, the upstream's `Http2Client` (its stream-id map) and its send buffer. Here,
when the decrypted read is nothing but complete DATA frames of one stream without flags
(`relayh2.data_frames`), their payloads are joined in one copy, the client's h2
connection is told of them as of one DATA frame (`relayh2.received`: h2's own state
machines, windows and content-length count, and mitmproxy's credit back to the client),
and they go through the stream's callable into the upstream's h2 stream
(`Http2Client`'s `send_data`, on the stream id it mapped), then to the upstream's TLS
layer: a `SendData` climbing to it when it is above the client's (the upstream opened
first: a client offering `h2` and `http/1.1`), its own `send_data` when it is in the
HTTP layer's stack (an `h2`-only client, D82).

Relayed only when (checked per read, else the read goes to mitmproxy's path unchanged):
the frames are complete DATA of one stream, unpadded, without flags (END_STREAM, so the
end of the request, trailers, the `request` hook and the audit line are mitmproxy's);
h2's frame buffer is empty; the client's h2 stream is open for receiving with the window
and content length for all of it and mitmproxy has its headers; the `HttpStream` streams
its request (`state_stream_request_body`, not paused, nothing queued, the flow not
killed, `request.stream` not False, `store_streamed_bodies` off); the upstream has mapped
the stream (its headers were sent; nothing of it waits in `stream_queue`), its h2 stream
is open for us, nothing is buffered on it and its window takes the whole payload (when it
does not, mitmproxy's path buffers as before and the backpressure watch sees it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mitmproxy import connection
from mitmproxy.proxy import commands, events, tunnel
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http2

from sandbox_egress.runtime.engine import relayh2
from sandbox_egress.runtime.engine.relayh2 import Commands


@dataclass(frozen=True, slots=True)
class Legs:
    client: _http2.Http2Server
    layers: Any  # the HttpLayer


@dataclass(frozen=True, slots=True)
class Upstream:
    h2: _http2.Http2Client
    out: tls.TLSLayer  # its TLS layer
    above: bool  # whether `out` is above the client's TLS layer (it encrypts a SendData)


def route(layer: tls.TLSLayer) -> Legs | None:
    """The client's HTTP/2 leg when `layer` is a client's TLS leg that may carry a relayed
    upload (the frames and their stream's upstream decide per read, `relay`), else None."""
    if type(layer) is not tls.ClientTLSLayer or layer.context.options.store_streamed_bodies:
        return None
    layers: Any = layer.child_layer
    if type(layers) is NextLayer:
        layers = layers.layer
    if type(layers) is not http.HttpLayer:
        return None
    client = layers.connections.get(layer.conn)
    return Legs(client, layers) if type(client) is _http2.Http2Server else None


def _upstream(layer: tls.TLSLayer, legs: Legs, server: connection.Server) -> Upstream | None:
    """The stream's upstream leg, `relayh2.route`'s two stacks seen from the client's leg:
    when the upstream was opened first (a client offering `h2` and `http/1.1`), the HTTP
    layer's table holds its `Http2Client` (or, when the upstream did not speak first, the
    `HttpClient` above it) and its TLS layer is above ours; when the HTTP
    layer opened it (an `h2`-only client, D82), the table holds the TLS layer of the
    stack it made, an `HttpClient` and the `Http2Client` below it."""
    found = legs.layers.connections.get(server)
    if type(found) is http.HttpClient:  # opened first, but the upstream did not speak
        found = found.child_layer  # first: the `HttpClient` above it (D630, D658)
    out: Any
    h2c: Any
    if type(found) is _http2.Http2Client:
        h2c, above = found, True
        out = next((x for x in layer.context.layers if _server_tls(x, server)), None)
    elif type(found) is tls.ServerTLSLayer:
        out, above = found, False
        h2c = getattr(found.child_layer, "child_layer", None)
    else:
        return None
    if (
        out is None
        or type(h2c) is not _http2.Http2Client
        or out.tunnel_state is not tunnel.TunnelState.OPEN
        or not (server.state & connection.ConnectionState.CAN_WRITE)
    ):
        return None
    return Upstream(h2c, out, above)


def _server_tls(layer: Any, conn: connection.Connection) -> bool:
    return type(layer) is tls.ServerTLSLayer and layer.conn is conn


def _streaming(
    layer: tls.TLSLayer, legs: Legs, cid: int, payload: int
) -> tuple[Any, Upstream, int] | None:
    """(the HttpStream, its upstream, the upstream's stream id) when `payload` bytes of
    client stream `cid` may be relayed now (module doc), else None."""
    if legs.client.streams.get(cid) is not _http2.StreamState.HEADERS_RECEIVED:
        return None
    stream = legs.layers.streams.get(cid)
    if stream is None or not relayh2.receiving(legs.client.h2_conn, cid, payload):
        return None
    flow = stream.flow
    if (
        stream.client_state != stream.state_stream_request_body
        or flow.request.stream is False
        or flow.error is not None
        or stream._paused is not None
        or stream.__dict__.get("_paused_event_queue")
    ):
        return None
    upstream = _upstream(layer, legs, flow.server_conn)
    if upstream is None:
        return None
    ours = upstream.h2.our_stream_id.get(cid)
    up = upstream.h2.h2_conn
    if (
        ours is None
        or upstream.h2.stream_queue.get(cid)
        or not upstream.h2.is_open_for_us(ours)
        or up.stream_buffers.get(ours)
        or up.local_flow_control_window(ours) < payload
    ):
        return None
    return stream, upstream, ours


def relay(layer: tls.TLSLayer, legs: Legs, plaintext: bytes) -> Commands:
    """The decrypted read relayed when it may be (module doc), else handed to the layers
    as mitmproxy would; returns the bytes relayed to the upstream (0 when not)."""
    h2c = legs.client.h2_conn
    taken = relayh2.take(h2c, plaintext)
    streaming = _streaming(layer, legs, taken.stream, taken.size) if taken is not None else None
    if taken is None or streaming is None:
        return (yield from _to_layers(layer, h2c, plaintext))
    stream, upstream, ours = streaming
    data = relayh2.received(h2c, taken)
    credit = h2c.data_to_send()
    if credit:  # the client's WINDOW_UPDATEs, as mitmproxy acknowledges a DATA frame
        yield from layer.send_data(credit)
    upstream.h2.last_activity = relayh2.now()  # as an event through `Http2Client` sets it
    sent = relayh2.forward(stream.flow.request, upstream.h2, ours, data)
    out = upstream.h2.h2_conn.data_to_send()
    if out and upstream.above:  # up to the upstream's TLS layer, which encrypts it
        yield commands.SendData(upstream.out.conn, out)
    elif out:  # the upstream's TLS layer is in the HTTP layer's stack: encrypt here
        yield from upstream.out.send_data(out)
    return sent


def _to_layers(layer: tls.TLSLayer, h2c: Any, plaintext: bytes) -> Commands:
    """The read to the layers with what an earlier one left of a frame, and what this one
    leaves of a frame kept back for the next (`_pending_frames`), as h2data keeps an
    upstream's: were it left in h2's own buffer, `relayh2.take` would find it there at
    every later read, and a client whose frames straddle its reads (16 KiB of DATA in a
    TLS record of 16 KiB) would never be relayed again once the layers took one (D657).
    What h2 already holds (the preface's read, or reads before the relay's route existed,
    may end mid-frame) is completed first, so h2's buffer empties too (D740)."""
    pending = h2c.__dict__.pop("_pending_frames", None)
    whole = pending + plaintext if pending else plaintext
    end = relayh2.layers_end(h2c.incoming_buffer, whole, h2c.max_inbound_frame_size)
    if end:
        data = whole if end == len(whole) else whole[:end]
        yield from layer.event_to_child(events.DataReceived(layer.conn, bytes(data)))
    if end < len(whole):  # after: h2data would join it before the read's frames (D656)
        h2c.__dict__["_pending_frames"] = bytearray(whole[end:])
    return 0
