"""runtime/engine/relayh2.py and relayh2up.py: the frames they relay (`data_frames`, tables and a property
over any frames cut anywhere), and the mitmproxy and h2 internals it reads or does in
mitmproxy's place are those of the installed versions (a change there fails here, not as
a corrupted body). End to end, both ways: tests/e2e/clients/test_relay_h2_e2e.py."""

from __future__ import annotations

import inspect

import h2.connection
import h2.frame_buffer
import h2.stream
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy.proxy.layers import http
from mitmproxy.proxy.layers.http import _http2

from sandbox_egress.runtime.engine import h2data, relayh2
from testbed.h2pair import open_get


def _source(obj: object) -> str:
    return inspect.getsource(obj)  # type: ignore[arg-type]


LIMIT = 64


def _found(buffer: bytes | bytearray) -> tuple[int, int, int] | None:
    return relayh2.data_frames(buffer, LIMIT)


def frame(kind: int, flags: int, sid: int, payload: bytes, length: int | None = None) -> bytes:
    size = len(payload) if length is None else length  # `length`: a header that lies
    return size.to_bytes(3) + bytes([kind, flags]) + sid.to_bytes(4) + payload


def test_the_internals_relayh2_reads_are_mitmproxys_and_h2s() -> None:
    # An upstream's DATA: handed on as the stream's data, credit given back per event.
    received = _source(_http2.Http2Connection.handle_h2_event)
    assert "yield ReceiveHttp(self.ReceiveData(event.stream_id, event.data))" in received
    assert "self.h2_conn.acknowledge_received_data(" in received
    assert "event.flow_controlled_length, event.stream_id" in received
    # The stream's callable, then the client's connection sends what is open for it.
    down = _source(http.HttpStream.state_stream_response_body)
    assert "self.flow.response.stream(event.data)" in down
    sent = _source(_http2.Http2Connection._handle_event)
    assert "if self.is_open_for_us(event.stream_id):" in sent
    assert "self.h2_conn.send_data(event.stream_id, event.data)" in sent
    # The upstream's stream ids are mapped to the client's; its activity is timed.
    client = _source(_http2.Http2Client._handle_event)
    assert "self.their_stream_id[ours] = event.stream_id" in client
    assert "self.last_activity = time.time()" in _source(_http2.Http2Client._handle_event2)
    # An upstream connected first (ALPN): its HTTP/2 connection sits in the HTTP layer's
    # table, under the client's TLS layer (`route`).
    layer = _source(http.HttpLayer._handle_event)
    assert "child_layer = Http2Client(self.context.fork())" in layer
    assert "self.connections[self.context.server] = child_layer" in layer
    # One the HTTP layer opened: its TLS layer under the HTTP layer, an HttpClient on it.
    assert "stack /= HttpClient(context)" in _source(http.HttpLayer)
    assert "self.child_layer = Http2Client(self.context)" in _source(http.HttpClient._handle_event)
    # An incomplete frame of the upstream waits in h2data's buffer (D318).
    assert '"_pending_frames"' in _source(h2data._merging_receive_data)
    # h2: what it does for a received DATA frame, which the relay does for the joined ones.
    frame_in = _source(h2.connection.H2Connection._receive_data_frame)
    assert "ConnectionInputs.RECV_DATA" in frame_in
    assert "self._inbound_flow_control_window_manager.window_consumed(" in frame_in
    assert "frames, stream_events = stream.receive_data(" in frame_in
    stream_in = _source(h2.stream.H2Stream.receive_data)
    assert "self.state_machine.process_input(StreamInputs.RECV_DATA)" in stream_in
    assert "self._inbound_window_manager.window_consumed(flow_control_len)" in stream_in
    assert "self._track_content_length(len(data), end_stream)" in stream_in
    # ... and what `_streaming` checks first: nothing left in h2's own buffers.
    buffered = _source(h2.frame_buffer.FrameBuffer.__init__)
    assert "self._data = bytearray()" in buffered and "self._headers_buffer" in buffered
    assert "if expected < actual" in _source(h2.stream.H2Stream._track_content_length)
    assert "def remote_flow_control_window" in _source(h2.connection.H2Connection)
    client_side = h2.connection.H2Connection()
    sid = open_get(client_side, h2.connection.H2Connection(h2.config.H2Configuration(False)))
    stream = client_side.streams[sid]
    assert (stream._expected_content_length, stream._actual_content_length) == (None, 0)


def test_the_internals_relayh2up_reads_are_mitmproxys() -> None:
    # A client's DATA on a streamed request: the stream's callable, each piece sent on to
    # the stream's own server connection (relayh2up, D653).
    up = _source(http.HttpStream.state_stream_request_body)
    assert "chunks = self.flow.request.stream(event.data)" in up
    assert "yield SendHttp(RequestData(self.stream_id, chunk), self.context.server)" in up
    # The upstream maps the client's stream id to its own, or queues the stream's events
    # while no stream is free; a server connection the HTTP layer opened has its TLS layer
    # in the table, the first of the stack it made.
    client = _source(_http2.Http2Client._handle_event)
    assert "self.our_stream_id[event.stream_id] = ours" in client
    assert "self.stream_queue[event.stream_id].append(event)" in client
    assert "self.connections[context.server] = stack[0]" in _source(http.HttpLayer)
    # A client's stream is mitmproxy's to read once its headers arrived.
    server = _source(_http2.Http2Server.handle_h2_event)
    assert "self.streams[event.stream_id] = StreamState.HEADERS_RECEIVED" in server
    # What the upstream leg buffers while its window is closed (`stream_buffers`).
    assert "stream_buffers" in _source(_http2.BufferedH2Connection)


def test_complete_data_frames_of_one_stream_without_flags() -> None:
    one, two = frame(0, 0, 1, b"a" * 10), frame(0, 0, 1, b"b" * 5)
    assert _found(one + two) == (1, len(one + two), 15)
    assert _found(one + two[:4]) == (1, len(one), 10)  # a cut header waits
    assert _found(one + two[:12]) == (1, len(one), 10)  # a cut payload waits


def test_anything_else_is_mitmproxys() -> None:
    data = frame(0, 0, 1, b"a" * 10)
    assert _found(b"") is None
    assert _found(data[:12]) is None  # no complete frame
    assert _found(data + frame(0, 0x1, 1, b"z")) is None  # END_STREAM
    assert _found(frame(0, 0x8, 1, b"\0zz")) is None  # padded
    assert _found(data + frame(0, 0, 3, b"z")) is None  # another stream
    assert _found(data + frame(8, 0, 1, b"\0\0\0\1")) is None  # WINDOW_UPDATE
    assert _found(frame(3, 0, 1, b"\0\0\0\0")) is None  # RST_STREAM
    assert _found(frame(1, 0x4, 1, b"")) is None  # HEADERS (trailers)
    assert _found(frame(0, 0, 0, b"z")) is None  # DATA on stream 0
    assert _found(frame(0, 0, 1, b"z" * (LIMIT + 1))) is None  # over the maximum: h2 refuses
    # An unfinished frame announcing more than the maximum after a relayable one: the
    # layers refuse it now rather than it waiting in `_pending_frames` (D660).
    assert _found(data + frame(0, 0, 1, b"z", length=LIMIT + 1)) is None
    assert _found(data + frame(0, 0, 1, b"z", length=LIMIT)) == (1, len(data), 10)


def test_the_payload_is_the_frames_joined() -> None:
    wire = bytearray(frame(0, 0, 1, b"ab") + frame(0, 0, 1, b"") + frame(0, 0, 1, b"cde"))
    found = _found(wire + b"\0\0")
    assert found == (1, len(wire), 5)
    assert relayh2.payload(wire + bytearray(b"\0\0"), found[1]) == b"abcde"


FRAMES = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 3, 8]),  # DATA mostly; HEADERS, RST_STREAM, WINDOW_UPDATE
        st.sampled_from([0, 0, 0, 0x1, 0x8]),  # none mostly; END_STREAM, PADDED
        st.sampled_from([1, 1, 1, 3]),
        st.integers(0, LIMIT + 8),
    ),
    max_size=8,
)


@given(FRAMES, st.integers(0, 400))
def test_any_frames_cut_anywhere(frames: list[tuple[int, int, int, int]], cut: int) -> None:
    wire = b"".join(frame(k, f, s, bytes([s]) * n) for k, f, s, n in frames)
    buffer = wire[:cut]
    complete, at = [], 0
    for kind, flags, sid, n in frames:
        if at + 9 + n > len(buffer):
            break
        complete.append((kind, flags, sid, n))
        at += 9 + n
    relayed = bool(complete) and all(
        (kind, flags, sid) == (0, 0, complete[0][2]) and n <= LIMIT
        for kind, flags, sid, n in complete
    )
    expected = (complete[0][2], at, sum(n for *_, n in complete)) if relayed else None
    assert _found(buffer) == expected
    assert _found(bytearray(buffer)) == expected
    if expected is not None:
        assert relayh2.payload(bytearray(buffer), at) == bytes([expected[0]]) * expected[2]


def test_complete_frames_end_before_an_unfinished_one() -> None:
    one, two = frame(0, 0, 1, b"a" * 10), frame(1, 0x4, 3, b"h" * 4)
    assert relayh2.complete(b"", LIMIT) == 0
    assert relayh2.complete(one[:5], LIMIT) == 0  # a cut header waits
    assert relayh2.complete(one + two, LIMIT) == len(one + two)  # any frames, whole
    assert relayh2.complete(one + two[:-1], LIMIT) == len(one)
    # An unfinished frame announcing more than h2 takes: h2 refuses it from its header.
    big = frame(0, 0, 1, b"z" * (LIMIT + 1))
    assert relayh2.complete(one + big[:20], LIMIT) == len(one) + 20


@given(FRAMES, st.integers(0, 400))
def test_complete_ends_where_the_frames_cut_anywhere_end(
    frames: list[tuple[int, int, int, int]], cut: int
) -> None:
    wire = b"".join(frame(k, f, s, bytes([s]) * n) for k, f, s, n in frames)
    buffer, at = wire[:cut], 0
    for *_, n in frames:
        if at + 9 + n > len(buffer):
            if at + 9 <= len(buffer) and n > LIMIT:
                at = len(buffer)
            break
        at += 9 + n
    assert relayh2.complete(buffer, LIMIT) == at


_FRAMES = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 8]),  # DATA mostly, HEADERS, WINDOW_UPDATE
        st.sampled_from([0, 0, 1, 8]),  # no flags mostly, END_STREAM, PADDED
        st.sampled_from([1, 1, 3]),
        st.binary(max_size=LIMIT),
    ),
    max_size=8,
)


@given(_FRAMES, st.lists(st.integers(min_value=0, max_value=600), max_size=6), st.booleans())
def test_reads_cut_anywhere_hand_on_the_frames_in_order_and_keep_at_most_one_unfinished(
    frames: list[tuple[int, int, int, bytes]], cuts: list[int], oversized: bool
) -> None:
    """The relay's per-read split of a client's wire (D656, D660), its reads cut anywhere: a
    read whose complete frames `data_frames` takes is relayed, else `complete` says what
    goes to the layers; the rest waits. Whatever the cuts: the frames handed on are the
    wire's in order, what waits is less than one frame, and a header announcing more than
    the maximum never waits (it goes to the layers, which refuse it from its header)."""
    wire = b"".join(frame(*f) for f in frames)
    if oversized:
        wire += frame(0, 0, 1, b"z", length=LIMIT + 1)
    bounds = sorted({min(c, len(wire)) for c in cuts} | {len(wire)})
    handed, pending, start = bytearray(), bytearray(), 0
    for end in bounds:
        whole = pending + wire[start:end]
        start = end
        found = relayh2.data_frames(whole, LIMIT)
        upto = found[1] if found is not None else relayh2.complete(whole, LIMIT)
        handed += whole[:upto]
        pending = bytearray(whole[upto:])
        assert len(pending) < 9 + LIMIT
        if len(pending) >= 9:
            assert int.from_bytes(pending[:3]) <= LIMIT
    done = wire[: len(wire) - len(pending)]
    assert bytes(handed) == done
    if oversized:  # its header always reaches the layers; its one byte of body may wait
        assert len(handed) >= len(wire) - 1, (len(handed), len(wire))


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_CLIENT_FRAMES = st.lists(
    st.one_of(
        st.tuples(st.just(0), st.sampled_from([0, 0, 1]), st.just(1), st.binary(max_size=LIMIT)),
        st.tuples(st.just(6), st.just(0), st.just(0), st.just(b"p" * 8)),  # PING
    ),
    max_size=10,
)


@given(
    _CLIENT_FRAMES,
    st.lists(st.integers(min_value=0, max_value=900), max_size=8),
    st.integers(min_value=0, max_value=3),
)
def test_once_a_read_finishes_h2s_unfinished_frame_its_buffer_is_empty_again(
    frames: list[tuple[int, int, int, bytes]], cuts: list[int], early: int
) -> None:
    """A client's leg as the upload relay sees it (D657, D740): its first `early` reads went
    to h2 whole (the preface, and any read before the relay's route existed), so h2 may
    hold part of a frame; every later read that is not relayed goes to h2 up to
    `relayh2.layers_end`, the rest kept for the next read. Whatever the cuts: the frames
    reach h2 or the relay in the wire's order, and once a read completes the frame h2
    held, h2's buffer is empty after it, so `relayh2.take` can relay the next read (in
    CI a read ending mid-frame before the relay was reached kept h2's buffer from ever
    emptying: a 16 MiB upload relayed 0 bytes)."""
    wire = _PREFACE + b"".join(frame(*f) for f in frames)
    bounds = sorted({min(c, len(wire)) for c in cuts} | {len(wire)})
    incoming = h2.frame_buffer.FrameBuffer(server=True)
    incoming.max_frame_size = LIMIT
    handed, pending, start = bytearray(), bytearray(), 0
    for i, end in enumerate(bounds):
        whole = pending + wire[start:end]
        start = end
        held = bytes(incoming._data)
        found = relayh2.data_frames(whole, LIMIT)
        if i < early:
            upto = len(whole)
        elif found is not None and not held and not incoming._preamble_len:
            upto = found[1]  # relayed: h2 never sees these bytes
            handed += whole[:upto]
            pending = bytearray(whole[upto:])
            continue
        else:
            upto = relayh2.layers_end(incoming, whole, LIMIT)
        pending = bytearray(whole[upto:])
        incoming.add_data(whole[:upto])
        parsed = len(list(incoming))
        handed += whole[:upto]
        if i >= early and incoming._data:  # only the frame it held, still unfinished
            assert held and not parsed and incoming._data.startswith(held), (held, parsed)
    assert bytes(handed + pending) == wire
