"""runtime/engine/h2frames.py: an upstream's DATA frames joined before h2 parses them (D318), and a
large chunk framed for an HTTP/2 client in one pass (D319).

The joining is a pure function over bytes (table and property tests, frames made and parsed
by hyperframe). The framing runs between real h2 connections in memory: the receiving h2
connection is the judge of every frame (it raises on a frame over its maximum frame size or
beyond its window); nothing is mocked.
"""

from __future__ import annotations

from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest
from hyperframe.frame import DataFrame, Frame, PingFrame, RstStreamFrame
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

from sandbox_egress.runtime.engine import h2data, h2frames
from testbed.h2pair import open_get

LIMIT = 2**17


def _data(stream: int, body: bytes, *flags: str, pad: int | None = None) -> bytes:
    frame = DataFrame(stream, body)
    for flag in flags:
        frame.flags.add(flag)
    if pad is not None:
        frame.flags.add("PADDED")
        frame.pad_length = pad
    return frame.serialize()


Parsed = tuple[str, int, list[str], bytes]


def _parsed(wire: bytes) -> list[Parsed]:
    """Each frame as (kind, stream, flags, data) or (kind, stream, flags, raw bytes)."""
    shown: list[Parsed] = []
    at = 0
    while at < len(wire):
        frame, length = Frame.parse_frame_header(memoryview(wire[at : at + 9]))
        frame.parse_body(memoryview(wire[at + 9 : at + 9 + length]))
        body = frame.data if isinstance(frame, DataFrame) else wire[at : at + 9 + length]
        shown.append((type(frame).__name__, frame.stream_id, sorted(frame.flags), body))
        at += 9 + length
    return shown


PING = PingFrame(0, b"12345678").serialize()

JOINED = [
    ("nothing", [], []),
    ("one frame stays", [_data(1, b"a")], [("DataFrame", 1, [], b"a")]),
    (
        "a run of one stream is one frame",
        [_data(1, b"ab"), _data(1, b"cd"), _data(1, b"e")],
        [("DataFrame", 1, [], b"abcde")],
    ),
    (
        "END_STREAM stays on the last frame and ends the run",
        [_data(1, b"a"), _data(1, b"b", "END_STREAM"), _data(3, b"c"), _data(3, b"d")],
        [("DataFrame", 1, ["END_STREAM"], b"ab"), ("DataFrame", 3, [], b"cd")],
    ),
    (
        "another stream's frame ends a run",
        [_data(1, b"a"), _data(3, b"b"), _data(1, b"c")],
        [("DataFrame", 1, [], b"a"), ("DataFrame", 3, [], b"b"), ("DataFrame", 1, [], b"c")],
    ),
    (
        "any other frame ends a run, in its place",
        [_data(1, b"a"), PING, _data(1, b"b"), _data(1, b"c")],
        [
            ("DataFrame", 1, [], b"a"),
            ("PingFrame", 0, [], PING),
            ("DataFrame", 1, [], b"bc"),
        ],
    ),
    (
        "a padded frame is not joined",
        [_data(1, b"a"), _data(1, b"b", pad=4), _data(1, b"c")],
        [
            ("DataFrame", 1, [], b"a"),
            ("DataFrame", 1, ["PADDED"], b"b"),
            ("DataFrame", 1, [], b"c"),
        ],
    ),
    (
        "a joined frame stops at the limit",
        [_data(1, b"x" * (LIMIT // 2))] * 3,
        [("DataFrame", 1, [], b"x" * LIMIT), ("DataFrame", 1, [], b"x" * (LIMIT // 2))],
    ),
    (
        "a frame over the limit is left whole for h2 to refuse",
        [_data(1, b"a"), _data(1, b"y" * (LIMIT + 1)), _data(1, b"b")],
        [
            ("DataFrame", 1, [], b"a"),
            ("DataFrame", 1, [], b"y" * (LIMIT + 1)),
            ("DataFrame", 1, [], b"b"),
        ],
    ),
    (
        "empty frames join, the empty END_STREAM too",
        [_data(5, b""), _data(5, b"abc"), _data(5, b"", "END_STREAM")],
        [("DataFrame", 5, ["END_STREAM"], b"abc")],
    ),
]


@pytest.mark.parametrize(
    ("frames", "expected"), [case[1:] for case in JOINED], ids=[case[0] for case in JOINED]
)
def test_coalesce(frames: list[bytes], expected: list[Parsed]) -> None:
    buffer = bytearray(b"".join(frames))
    assert _parsed(bytes(h2frames.coalesce(buffer, LIMIT))) == expected
    assert buffer == b""


def test_data_on_stream_0_is_left_for_h2_to_refuse() -> None:
    wire = b"\0\0\1\0\0\0\0\0\0a" * 2  # hyperframe will not make these
    assert h2frames.coalesce(bytearray(wire), LIMIT) == wire


def test_an_incomplete_frame_stays_in_the_buffer() -> None:
    wire = _data(1, b"a" * 100) + _data(1, b"b" * 100)
    for cut in (len(wire) - 1, 109 + 5, 109 + 9):
        buffer = bytearray(wire[:cut])
        assert _parsed(bytes(h2frames.coalesce(buffer, LIMIT))) == [
            ("DataFrame", 1, [], b"a" * 100)
        ]
        assert buffer == wire[109:cut]
    buffer = bytearray(wire[:5])
    assert h2frames.coalesce(buffer, LIMIT) == b"" and buffer == wire[:5]


def _canonical(wire: bytes) -> list[Parsed]:
    """The frames with every joinable run joined without limit: what coalesce may not change."""
    out: list[Parsed] = []
    open_run = False
    for kind, stream, flags, body in _parsed(wire):
        joinable = kind == "DataFrame" and "PADDED" not in flags and stream
        if joinable and open_run and out[-1][1] == stream:
            out[-1] = (kind, stream, flags, out[-1][3] + body)
        else:
            out.append((kind, stream, flags, body))
        open_run = bool(joinable) and not flags
    return out


_frame = st.one_of(
    st.builds(_data, st.sampled_from([1, 3]), st.binary(max_size=300)),
    st.builds(
        lambda s, b: _data(s, b, "END_STREAM"), st.sampled_from([1, 3]), st.binary(max_size=50)
    ),
    st.builds(lambda b, p: _data(1, b, pad=p), st.binary(max_size=50), st.integers(0, 20)),
    st.just(PING),
    st.just(RstStreamFrame(3).serialize()),
)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(_frame, max_size=30),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
    limit=st.integers(16, 1000),
)
def test_coalesce_keeps_the_stream_whatever_the_reads(
    frames: list[bytes], cuts: list[int], limit: int
) -> None:
    """Fed in reads cut anywhere, coalesce gives h2 the same frames up to joining: the same
    data per stream in the same order, every other frame unchanged in place, END_STREAM
    where it was, no joined frame over `limit`, nothing left over."""
    wire = b"".join(frames)
    buffer, out = bytearray(), bytearray()
    start = 0
    for cut in sorted(min(c, len(wire)) for c in cuts) + [len(wire)]:
        buffer += wire[start:cut]
        start = max(start, cut)
        out += h2frames.coalesce(buffer, limit)
    assert buffer == b""
    assert _canonical(bytes(out)) == _canonical(wire)
    at = 0
    while at < len(out):  # a frame over the limit is one that came in so
        end = at + 9 + int.from_bytes(out[at : at + 3])
        assert end - at - 9 <= limit or out[at:end] in frames
        at = end


# ---- real h2 connections ---------------------------------------------------------------------


@pytest.fixture
def installed() -> Iterator[None]:
    receive, send = BufferedH2Connection.receive_data, BufferedH2Connection.send_data
    h2data.install()
    h2frames.install()
    yield
    BufferedH2Connection.receive_data = receive  # type: ignore[method-assign]
    BufferedH2Connection.send_data = send  # type: ignore[method-assign]


def _upstream_pair() -> tuple[h2.connection.H2Connection, BufferedH2Connection, int]:
    """A server (h2) and mitmproxy's client connection (the upstream leg), one GET open."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client = BufferedH2Connection(h2.config.H2Configuration(client_side=True))
    stream = open_get(client, server)
    return server, client, stream


def test_an_upstream_body_in_8_kib_frames_reaches_h2_as_few_frames(
    installed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client, stream = _upstream_pair()
    body = bytes(range(256)) * 1024  # 256 KiB in 32 frames
    for at in range(0, len(body), 8192):
        server.send_data(stream, body[at : at + 8192], end_stream=at + 8192 == len(body))
    wire = server.data_to_send()
    seen: list[int] = []
    original = h2.connection.H2Connection.receive_data

    def counted(self: h2.connection.H2Connection, data: bytes) -> list[h2.events.Event]:
        seen.extend(len(body) for _, _, _, body in _parsed(bytes(data)))
        return original(self, data)

    monkeypatch.setattr(h2.connection.H2Connection, "receive_data", counted)
    found = client.receive_data(wire[:100_000]) + client.receive_data(wire[100_000:])
    data = [e for e in found if isinstance(e, h2.events.DataReceived)]
    assert b"".join(e.data for e in data) == body
    assert seen == [12 * 8192, 2**17, 4 * 8192]  # joined up to 128 KiB per frame, per read
    assert data[-1].stream_ended is not None
    assert [type(e).__name__ for e in found][-1] == "StreamEnded"
    assert client.inbound_flow_control_window == 2**31 - 1 - len(body)


def test_an_upstream_frame_over_the_maximum_is_still_refused(installed: None) -> None:
    server, client, stream = _upstream_pair()
    frame = DataFrame(stream, b"z" * (2**17 + 1))
    with pytest.raises(h2.exceptions.FrameTooLargeError):
        client.receive_data(frame.serialize())


def _client_leg(
    max_frame: int, window: int
) -> tuple[h2.connection.H2Connection, BufferedH2Connection, int]:
    """A client (h2, announcing `max_frame` and an initial window of `window`) and mitmproxy's
    server connection (the proxy's client leg), one GET open and answered with headers."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.local_settings = h2.settings.Settings(
        client=True,
        initial_values={
            h2.settings.SettingCodes.MAX_FRAME_SIZE: max_frame,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window,
        },
    )
    client.max_inbound_frame_size = max_frame  # what h2 sets when a changed setting is acked
    server = BufferedH2Connection(h2.config.H2Configuration(client_side=False))
    stream = open_get(client, server)
    return client, server, stream


def _deliver(
    client: h2.connection.H2Connection,
    server: BufferedH2Connection,
    chunks: list[bytes],
) -> tuple[bytes, list[int], int]:
    """Sends `chunks`, then the end of the stream, as mitmproxy's HTTP/2 layer does (an empty
    DATA frame with END_STREAM, queued behind any data the window holds back), from the
    server to the client, which gives
    back the window its DATA took after each delivery until the stream ends: the bytes, the
    DATA frames' sizes and how many frames carried END_STREAM."""
    stream = 1
    for chunk in chunks:
        server.send_data(stream, chunk)
    server.end_stream(stream)
    got, sizes, ends = bytearray(), [], 0
    for _ in range(100_000):
        wire, taken = server.data_to_send(), 0
        sizes += [len(body) for kind, _, _, body in _parsed(wire) if kind == "DataFrame"]
        for event in client.receive_data(wire):  # raises on a frame too large or too early
            if isinstance(event, h2.events.DataReceived):
                assert ends == 0
                got += event.data
                ends += event.stream_ended is not None
                taken += event.flow_controlled_length
        if ends:
            return bytes(got), sizes, ends
        assert taken, "the server sent nothing while the client's window was open"
        client.increment_flow_control_window(taken)
        client.increment_flow_control_window(taken, stream_id=stream)
        server.receive_data(client.data_to_send())
    raise AssertionError("the stream did not end")


def test_a_large_chunk_is_framed_within_the_clients_frame_size(installed: None) -> None:
    client, server, _ = _client_leg(16384, 2**31 - 1)
    client.increment_flow_control_window(2**30)
    server.receive_data(client.data_to_send())
    body = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and 4 bytes
    got, sizes, ends = _deliver(client, server, [body])
    assert got == body and ends == 1
    assert sizes == [16384] * 64 + [4, 0]


def test_a_client_with_a_small_window_gets_every_byte(installed: None) -> None:
    client, server, _ = _client_leg(16384, 40_000)
    body = bytes(range(256)) * 2048
    got, sizes, ends = _deliver(client, server, [body[:300_000], body[300_000:]])
    assert got == body and ends == 1
    assert max(sizes) <= 16384


@pytest.mark.parametrize("send", [h2frames._original_send_data, h2frames.send_data])
def test_a_reset_stream_raises_as_before(send: object) -> None:
    """mitmproxy's HTTP/2 layer handles the error; no byte of the chunk goes out."""
    client, server, stream = _client_leg(16384, 2**31 - 1)
    client.reset_stream(stream)
    server.receive_data(client.data_to_send())
    with pytest.raises(h2.exceptions.StreamClosedError):
        send(server, stream, b"x" * 100_000)  # type: ignore[operator]
    assert _parsed(server.data_to_send()) == []


@settings(max_examples=40, deadline=None)
@given(
    max_frame=st.sampled_from([16384, 16385, 20000, 2**17]),
    window=st.integers(4096, 300_000),
    lengths=st.lists(st.integers(0, 200_000), min_size=1, max_size=4),
)
def test_framing_is_valid_whatever_the_window(
    max_frame: int, window: int, lengths: list[int]
) -> None:
    """Every byte arrives in order, END_STREAM once and last; the client's h2 raises on any
    frame over its maximum size or its window, so getting here means none was."""
    receive, send = BufferedH2Connection.receive_data, BufferedH2Connection.send_data
    h2data.install()
    h2frames.install()
    try:
        client, server, _ = _client_leg(max_frame, window)
        chunks = [bytes([n % 251]) * length for n, length in enumerate(lengths)]
        got, sizes, ends = _deliver(client, server, chunks)
    finally:
        BufferedH2Connection.receive_data = receive  # type: ignore[method-assign]
        BufferedH2Connection.send_data = send  # type: ignore[method-assign]
    assert got == b"".join(chunks) and ends == 1
    assert max(sizes) <= max_frame
