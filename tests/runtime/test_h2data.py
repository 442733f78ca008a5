"""runtime/engine/h2data.py: one event per run of DATA frames, and a DATA frame's cheap repr (D289).

Real h2 connections (the h2 library on one side, mitmproxy's `BufferedH2Connection` on the
other) exchange real frames in memory; nothing is mocked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from hyperframe.frame import DataFrame, Frame
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

from sandbox_egress.runtime.engine import h2data, h2frames
from testbed.h2pair import open_get


@pytest.fixture
def installed() -> Iterator[None]:
    receive, own_repr = BufferedH2Connection.receive_data, "_body_repr" in DataFrame.__dict__
    send = BufferedH2Connection.send_data
    h2data.install()
    h2frames.install()
    yield
    BufferedH2Connection.receive_data = receive  # type: ignore[method-assign]
    BufferedH2Connection.send_data = send  # type: ignore[method-assign]
    if not own_repr:
        del DataFrame._body_repr


def _data(
    stream: int, body: bytes, length: int | None = None, ended: bool = False
) -> h2.events.DataReceived:
    event = h2.events.DataReceived(stream_id=stream)
    event.data = body
    event.flow_controlled_length = len(body) if length is None else length
    event.stream_ended = h2.events.StreamEnded(stream_id=stream) if ended else None
    return event


def _shape(found: list[h2.events.Event]) -> list[tuple[object, ...]]:
    shown: list[tuple[object, ...]] = []
    for event in found:
        if isinstance(event, h2.events.DataReceived):
            ended = event.stream_ended is not None
            shown.append(("data", event.stream_id, event.data, event.flow_controlled_length, ended))
        else:
            shown.append((type(event).__name__, getattr(event, "stream_id", None)))
    return shown


PING = h2.events.PingReceived(ping_data=b"12345678")
ENDED_1 = h2.events.StreamEnded(stream_id=1)
TRAILERS_1 = h2.events.TrailersReceived(stream_id=1)

MERGED = [
    ("nothing", [], []),
    ("one frame stays as it is", [_data(1, b"a")], [("data", 1, b"a", 1, False)]),
    (
        "a run of one stream is one event, lengths summed (padding counts)",
        [_data(1, b"ab", 7), _data(1, b"cd"), _data(1, b"e", 3)],
        [("data", 1, b"abcde", 12, False)],
    ),
    (
        "the last frame's end of stream is kept, and ends the run",
        [_data(1, b"a"), _data(1, b"b", ended=True), ENDED_1],
        [("data", 1, b"ab", 2, True), ("StreamEnded", 1)],
    ),
    (
        "another stream's frame ends a run",
        [_data(1, b"a"), _data(1, b"b"), _data(3, b"x"), _data(1, b"c")],
        [("data", 1, b"ab", 2, False), ("data", 3, b"x", 1, False), ("data", 1, b"c", 1, False)],
    ),
    (
        "any other event ends a run, in its place",
        [_data(1, b"a"), PING, _data(1, b"b"), _data(1, b"c"), TRAILERS_1],
        [
            ("data", 1, b"a", 1, False),
            ("PingReceived", None),
            ("data", 1, b"bc", 2, False),
            ("TrailersReceived", 1),
        ],
    ),
    (
        "an empty frame ending the stream joins its run",
        [_data(5, b"abc"), _data(5, b"", ended=True)],
        [("data", 5, b"abc", 3, True)],
    ),
]


@pytest.mark.parametrize(
    ("found", "expected"), [case[1:] for case in MERGED], ids=[case[0] for case in MERGED]
)
def test_merged(found: list[h2.events.Event], expected: list[tuple[object, ...]]) -> None:
    assert _shape(h2data.merged(found)) == expected


def test_a_single_frame_is_handed_on_as_the_same_object() -> None:
    event = _data(1, b"a")
    assert h2data.merged([PING, event])[1] is event


def _pair() -> tuple[h2.connection.H2Connection, BufferedH2Connection, int]:
    """A server (h2) and mitmproxy's client connection, handshaken, with one GET open."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client = BufferedH2Connection(h2.config.H2Configuration(client_side=True))
    stream = open_get(client, server)
    return server, client, stream


def _frames(wire: bytes) -> list[str]:
    names, at = [], 0
    while at < len(wire):
        frame, length = Frame.parse_frame_header(memoryview(wire[at : at + 9]))
        names.append(type(frame).__name__)
        at += 9 + length
    return names


def test_a_body_in_8_kib_frames_arrives_as_one_event_per_read(installed: None) -> None:
    server, client, stream = _pair()
    body = hashlib.sha256(b"x").digest() * 8192  # 256 KiB
    for at in range(0, len(body), 8192):
        last = at + 8192 >= len(body)
        server.send_data(stream, body[at : at + 8192], end_stream=last, pad_length=3)
    wire = server.data_to_send()
    assert _frames(wire) == ["DataFrame"] * 32
    found = client.receive_data(wire)
    assert [type(e).__name__ for e in found] == ["DataReceived", "StreamEnded"]
    data = found[0]
    assert isinstance(data, h2.events.DataReceived)
    assert data.data == body
    assert data.flow_controlled_length == len(body) + 32 * 4  # each frame's padding
    assert data.stream_ended is not None
    # What the frames took from the window is what the event gives back when acknowledged.
    assert client.inbound_flow_control_window == 2**31 - 1 - data.flow_controlled_length


def test_each_read_is_its_own_event(installed: None) -> None:
    server, client, stream = _pair()
    for n in range(4):
        server.send_data(stream, bytes([n]) * 8192)
    wire = server.data_to_send()
    half = len(wire) // 2 + 5  # mid-frame: the frame cut in two waits for its end
    first, second = client.receive_data(wire[:half]), client.receive_data(wire[half:])
    assert [len(e.data) for e in first + second] == [16384, 16384]


def test_a_client_legs_frame_left_by_the_upload_relay_comes_first(installed: None) -> None:
    """The upload relay (relayh2up) keeps the part of a frame its read ended in, on a
    client leg's connection too; the next read that goes to the layers must be joined
    after it (D656: the part was lost, and the connection's frames with it)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = BufferedH2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.receive_data(client.data_to_send())
    stream = client.get_next_available_stream_id()
    client.send_headers(stream, [(":method", "POST"), (":scheme", "https"),
                                 (":authority", "a.test"), (":path", "/")])  # fmt: skip
    server.receive_data(client.data_to_send())
    client.send_data(stream, b"x" * 100, end_stream=True)
    wire = client.data_to_send()
    server.__dict__["_pending_frames"] = bytearray(wire[:50])  # what the relay left
    found = server.receive_data(wire[50:])
    assert [type(e).__name__ for e in found] == ["DataReceived", "StreamEnded"]
    assert found[0].data == b"x" * 100
    assert not server.__dict__.get("_pending_frames")


def _frame(data: bytes | memoryview, pad: int | None) -> DataFrame:
    frame = DataFrame(1, data)
    if pad is not None:
        frame.flags.add("PADDED")
        frame.pad_length = pad
    return frame


REPRS = [
    ("empty", b"", None),
    ("five bytes", b"hello", None),
    ("ten bytes", bytes(range(10)), None),
    ("eleven bytes", bytes(range(11)), None),
    ("8 KiB", bytes(range(256)) * 32, None),
    ("a memoryview", memoryview(bytes(range(64))), None),
    ("padded, empty", b"", 0),
    ("padded by three", b"abc", 3),
    ("padded, long", bytes(range(200)), 255),
    ("padding alone past ten bytes", b"", 12),
    ("padding alone", b"", 4),
]


@pytest.mark.parametrize(("data", "pad"), [c[1:] for c in REPRS], ids=[c[0] for c in REPRS])
def test_short_body_repr_is_hyperframes_text(data: bytes, pad: int | None) -> None:
    expected = Frame._body_repr(_frame(data, pad))
    assert h2data.short_body_repr(_frame(data, pad)) == expected


def test_installed_repr_of_a_data_frame(installed: None) -> None:
    frame = _frame(bytes(range(100)), None)
    assert repr(frame) == "DataFrame(stream_id=1, flags=[]): <hex:00010203040506070809...>"


def test_a_frame_announcing_more_than_the_maximum_is_refused_from_its_header(
    installed: None,
) -> None:
    """h2 4.4 keeps an oversized frame until all of it arrived (up to 16 MiB); the installed
    receive refuses it once its header is in, client leg and upstream leg alike (D660)."""
    for client_side in (False, True):
        conn = BufferedH2Connection(h2.config.H2Configuration(client_side=client_side))
        conn.initiate_connection()
        conn.data_to_send()
        head = b"" if client_side else b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        settings = b"\0\0\0\x04\0\0\0\0\0"
        conn.receive_data(head + settings)
        conn.data_to_send()
        over = (conn.max_inbound_frame_size + 1).to_bytes(3) + b"\0\0\0\0\0\1" + b"z" * 10
        with pytest.raises(h2.exceptions.FrameTooLargeError):
            conn.receive_data(over[:9])
        sent = conn.data_to_send()  # a GOAWAY (type 7) with FRAME_SIZE_ERROR (6)
        assert (sent[3], int.from_bytes(sent[13:17])) == (7, 6), sent
