"""An HTTP/2 download's DATA relayed from the upstream's stream to the client's below
mitmproxy's HTTP layers, behind `--body-relay` (issue 49, D575-D579).

The HTTP/2 half of `runtime.engine.relay` (which dispatches here, `route`/`relay`): both
legs HTTP/2, a response streaming from the upstream to the client. Per upstream read,
mitmproxy takes the DATA through the upstream's `Http2Client`, the HTTP layer, the
request's `HttpStream` and the product's wrappers around it, the client's `Http2Server`
and its backpressure watch (addons/layers/backpressure.py). Here, once the read is
decrypted, when it is nothing but complete DATA frames of one stream without flags (after
what an earlier read left of a frame, `h2frames`'s `_pending_frames`):

* a minimal frame reader (`data_frames`, `payload`) takes their payloads, joined, out of
  the read in one copy, and the upstream's h2 connection is told of them as one DATA
  frame of their total length, through the methods h2's own `_receive_data_frame` calls
  (the connection's state machine and inbound window, `H2Stream.receive_data`: the
  stream's state machine, window and content-length count), so both stay h2's; the
  credit is given back as mitmproxy gives it (`acknowledge_received_data`, its
  WINDOW_UPDATEs encrypted to the upstream at once);
* their payload goes through the stream's own callable (counter, meter, echo mask), in
  the order mitmproxy calls it, and what it returns goes into the client's h2 connection
  (`send_data`, mitmproxy's, framed by `h2frames`), then to the client's TLS layer: its
  `send_data` when it is below the upstream's, a `SendData` climbing to it when it is
  above (`route`: which depends on who opened the upstream connection).

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

import h2.connection
import h2.stream
from h2.frame_buffer import FrameBuffer
from mitmproxy import connection
from mitmproxy.proxy import commands, events, tunnel
from mitmproxy.proxy.layer import NextLayer
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http2

Commands = Generator[commands.Command, Any, int]

_HEADER = 9
_FIELDS = struct.Struct(">HBBBL")  # length's high 16 bits, its low 8, type, flags, stream
_RECEIVING = (h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_LOCAL)


@dataclass(frozen=True, slots=True)
class Legs:
    upstream: _http2.Http2Client
    client: _http2.Http2Server
    layers: Any  # the HttpLayer
    out: tls.TLSLayer  # the client's TLS layer
    above: bool  # whether `out` is above the upstream's TLS layer (`route`)


def route(layer: tls.TLSLayer) -> Legs | None:
    """The two HTTP/2 legs when `layer` is an upstream's TLS leg that may carry a relayed
    download (the frames decide per read, `relay`), else None.

    Two stacks: when mitmproxy opened the upstream first (the client offered `h2` and
    `http/1.1`: the client gets what the upstream chose), the upstream's TLS layer is
    above the client's, whose NextLayer holds the HTTP layer; when the HTTP layer opened
    it (an `h2`-only client, D82), the upstream's TLS layer is below the HTTP layer, under
    an `HttpClient`, and the client's TLS layer is above. In the first stack the HTTP
    layer's table holds the upstream's `Http2Client` when the upstream spoke first (its
    SETTINGS before the request), else the `HttpClient` above it, as in the second (D630).
    Either way the HTTP layer's table holds the client's `Http2Server`."""
    if type(layer) is not tls.ServerTLSLayer or layer.context.options.store_streamed_bodies:
        return None
    child: Any = layer.child_layer
    client = layer.context.client
    out: Any
    layers: Any
    upstream: Any
    if type(child) is tls.ClientTLSLayer:  # opened first: the client's TLS layer below
        out, above = child, False
        layers = child.child_layer
        if type(layers) is NextLayer:
            layers = layers.layer
        upstream = getattr(layers, "connections", {}).get(layer.conn)
        if type(upstream) is http.HttpClient:  # the upstream did not speak first (D630)
            upstream = getattr(upstream, "child_layer", None)
    elif type(child) is http.HttpClient:  # opened by the HTTP layer: the client's above
        above, upstream = True, child.child_layer
        found = layer.context.layers
        layers = next((x for x in reversed(found) if type(x) is http.HttpLayer), None)
        out = next((x for x in found if type(x) is tls.ClientTLSLayer and x.conn is client), None)
    else:
        return None
    if type(layers) is not http.HttpLayer or out is None:
        return None
    server = layers.connections.get(client)
    if (
        type(upstream) is not _http2.Http2Client
        or type(server) is not _http2.Http2Server
        or out.tunnel_state is not tunnel.TunnelState.OPEN
        or not (client.state & connection.ConnectionState.CAN_WRITE)
    ):
        return None
    return Legs(upstream, server, layers, out, above)


def data_frames(buffer: bytes | bytearray, limit: int) -> tuple[int, int, int] | None:
    """(the stream, where the complete frames end, their payload) when the complete
    frames at the head of `buffer` are one or more DATA frames of one stream with no flags
    and none longer than `limit`, else None. An incomplete frame at the end waits for the
    next read, unless its header announces more than `limit` (None: the layers refuse it
    now, D660)."""
    size, at, payload, sid = len(buffer), 0, 0, 0
    while size - at >= _HEADER:
        high, low, kind, flags, stream = _FIELDS.unpack_from(buffer, at)
        length = high << 8 | low
        if at + _HEADER + length > size:  # unfinished: left for the next read, unless
            if length > limit:  # it is refused from its header (h2data, D660)
                return None
            break
        if kind or flags or length > limit or not stream & 0x7FFFFFFF or (sid and stream != sid):
            return None
        sid = stream
        payload += length
        at += _HEADER + length
    return (sid, at, payload) if at else None


def complete(buffer: bytes | bytearray | memoryview, limit: int) -> int:
    """Where the complete frames at the head of `buffer` end; all of it when the last,
    incomplete frame announces more than `limit` (h2 refuses it from its header alone)."""
    size, at = len(buffer), 0
    while size - at >= _HEADER:
        length = int.from_bytes(buffer[at : at + 3])
        if at + _HEADER + length > size:
            return size if length > limit else at
        at += _HEADER + length
    return at


def layers_end(incoming: FrameBuffer, whole: bytes | bytearray, limit: int) -> int:
    """Where the part of `whole` (a client leg's read, after what an earlier read left)
    that goes to h2 ends: h2's rest of the preface, then up to the last complete frame of
    what h2 holds and `whole`, so that h2's buffer is empty again once a read finishes
    the frame it held (D657, D740); all of it while the preface or h2's unfinished frame
    is not yet complete, or when the last frame announces more than `limit` (`complete`)."""
    pre, held = incoming._preamble_len, incoming._data
    if pre >= len(whole):
        return len(whole)
    if not held:
        return pre + complete(memoryview(whole)[pre:], limit)
    joined = held + memoryview(whole)[pre:]  # one copy, once: h2's buffer is empty after
    end = complete(joined, limit)
    return len(whole) if end < len(held) else pre + end - len(held)


def payload(buffer: bytes | bytearray, end: int) -> bytes:
    """The payloads of the frames before `end` (checked by `data_frames`), joined."""
    view, at, pieces = memoryview(buffer), 0, []
    while at < end:
        length = int.from_bytes(view[at : at + 3])
        pieces.append(view[at + _HEADER : at + _HEADER + length])
        at += _HEADER + length
    joined = b"".join(pieces)
    del pieces
    view.release()
    return joined


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
    if not receiving(h2c, sid, payload):
        return None
    cid, down = stream.stream_id, legs.client.h2_conn
    if (
        not legs.client.is_open_for_us(cid)
        or down.stream_buffers.get(cid)
        or down.local_flow_control_window(cid) < payload
    ):
        return None
    return stream, cid


def receiving(h2c: h2.connection.H2Connection, sid: int, payload: int) -> bool:
    """Whether h2 would take a DATA frame of `payload` bytes on stream `sid` without
    flags: the stream open for receiving, both inbound windows and the content length
    large enough (what `_receive_data_frame` and `H2Stream.receive_data` check)."""
    h2s = h2c.streams.get(sid)
    return not (
        h2s is None
        or h2s.state_machine.state not in _RECEIVING
        or h2c.remote_flow_control_window(sid) < payload
        or (
            h2s._expected_content_length is not None
            and h2s._actual_content_length + payload > h2s._expected_content_length
        )
    )


@dataclass(frozen=True, slots=True)
class Taken:
    stream: int  # the frames' stream
    size: int  # their payloads' total length
    whole: bytes | bytearray  # what was pending and the read, joined
    end: int  # where the complete frames end in `whole`


def take(h2c: h2.connection.H2Connection, plaintext: bytes) -> Taken | None:
    """The complete DATA frames of one stream at the head of what `h2c` has pending and
    `plaintext` (`data_frames`), when h2's own buffers hold nothing, else None."""
    pending: bytearray | None = h2c.__dict__.get("_pending_frames")
    # Joined only when an earlier read left part of a frame: a read that is not relayed
    # goes to the layers uncopied (they join it with what is pending themselves, D318).
    whole: bytes | bytearray = pending + plaintext if pending else plaintext
    if h2c.incoming_buffer._data or h2c.incoming_buffer._headers_buffer:
        return None
    found = data_frames(whole, h2c.max_inbound_frame_size)
    return None if found is None else Taken(found[0], found[2], whole, found[1])


def received(h2c: h2.connection.H2Connection, taken: Taken) -> bytes:
    """The frames' payloads, joined, once `h2c` is told of them as of one DATA frame of
    their total length and has acknowledged it as mitmproxy does (its WINDOW_UPDATEs in
    `h2c.data_to_send()`); an incomplete last frame waits for the next read, as in
    h2data. The caller checked `receiving` and the rest (D575)."""
    sid, size = taken.stream, taken.size
    data = payload(taken.whole, taken.end)
    h2c.__dict__["_pending_frames"] = bytearray(taken.whole[taken.end :])
    # What h2's `_receive_data_frame` and `H2Stream.receive_data` do for one DATA frame of
    # `size` bytes without flags, and mitmproxy's credit for it. `receiving` checked what
    # h2 checks there (states, windows, content length): an error here is a bug, and the
    # layers' exception handling closes both legs (D577).
    h2c.state_machine.process_input(h2.connection.ConnectionInputs.RECV_DATA)
    h2c._inbound_flow_control_window_manager.window_consumed(size)
    h2c.streams[sid].receive_data(data, False, size)
    h2c.acknowledge_received_data(size, sid)
    return data


now = time.time


def relay(layer: tls.TLSLayer, legs: Legs, plaintext: bytes) -> Commands:
    """The decrypted read relayed when it may be (module doc), else handed to the layers
    as mitmproxy would; returns the bytes relayed to the client (0 when not)."""
    h2c = legs.upstream.h2_conn
    taken = take(h2c, plaintext)
    streaming = _streaming(legs, taken.stream, taken.size) if taken is not None else None
    if taken is None or streaming is None:
        yield from layer.event_to_child(events.DataReceived(layer.conn, plaintext))
        return 0
    stream, cid = streaming
    data = received(h2c, taken)
    legs.upstream.last_activity = now()
    credit = h2c.data_to_send()
    if credit:
        yield from layer.send_data(credit)
    sent = forward(stream.flow.response, legs.client, cid, data)
    out = legs.client.h2_conn.data_to_send()
    if out and legs.above:  # up to the client's TLS layer, which encrypts it on its way
        yield commands.SendData(legs.out.conn, out)
    elif out:  # the client's TLS layer is below: encrypt as its `send_data` does
        yield from legs.out.send_data(out)
    return sent


def forward(message: Any, h2: _http2.Http2Connection, sid: int, data: bytes) -> int:
    """`data` through `message`'s stream callable into stream `sid` of `h2`, each piece
    while the stream is open for us, as `HttpStream`'s `state_stream_*_body` and
    `Http2Connection` do (an empty piece too: mitmproxy sends it as an empty DATA
    frame); the bytes sent."""
    call: Callable[[bytes], Iterable[bytes] | bytes] | None = (
        message.stream if callable(message.stream) else None
    )
    out = call(data) if call is not None else data
    chunks = (out,) if isinstance(out, bytes) else out
    sent = 0
    for chunk in chunks:
        if h2.is_open_for_us(sid):
            h2.h2_conn.send_data(sid, chunk)
            sent += len(chunk)
    return sent
