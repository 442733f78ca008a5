"""runtime/engine/relaychunks.py: the body relay's reading of a chunked body, against
h11's `ChunkedReader` — the reader mitmproxy's HTTP/1 layer uses — over generated bodies
(well formed and not) cut into generated reads. The relay reads what it can of each read
that starts with nothing buffered and hands the rest to h11 from the state it leaves, as
runtime/engine/relay.py does; the pieces handed on, the end of the message and any
refusal must be h11's alone, read for read (D605)."""

from __future__ import annotations

from h11._events import Data, EndOfMessage
from h11._readers import ChunkedReader
from h11._receivebuffer import ReceiveBuffer
from h11._util import LocalProtocolError
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.runtime.engine import relaychunks

Outcome = tuple[list[bytes], str]


def _h11(reader: ChunkedReader, buf: ReceiveBuffer, pieces: list[bytes]) -> str | None:
    """mitmproxy's loop: call the reader until it wants more; 'end' or 'refused' if done."""
    while True:
        try:
            event = reader(buf)
        except LocalProtocolError:
            return "refused"
        if event is None:
            return None
        if isinstance(event, EndOfMessage):
            return "end"
        if isinstance(event, Data):
            pieces.append(bytes(event.data))


def _layers_only(reads: list[bytes]) -> Outcome:
    reader, buf, pieces = ChunkedReader(), ReceiveBuffer(), list[bytes]()
    for read in reads:
        buf += read
        if done := _h11(reader, buf, pieces):
            return pieces, done
    return pieces, "open"


def _relayed(reads: list[bytes]) -> Outcome:
    reader, buf, pieces = ChunkedReader(), ReceiveBuffer(), list[bytes]()
    for read in reads:
        if not len(buf) and not reader._reading_trailer:  # relay.py's condition
            taken = relaychunks.take(read, reader._bytes_in_chunk, reader._bytes_to_discard)
            reader._bytes_in_chunk, reader._bytes_to_discard = taken.in_chunk, taken.to_discard
            pieces += taken.pieces
            read = read[taken.stop :]
        buf += read
        if read and (done := _h11(reader, buf, pieces)):
            return pieces, done
    return pieces, "open"


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [body[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


SIZE_SPELLINGS = st.sampled_from(["{:x}", "{:X}", "0{:x}", "{:x};ext=1", "{:x} ", "{:x}\t"])
chunk = st.tuples(st.binary(min_size=1, max_size=40), SIZE_SPELLINGS)
ending = st.sampled_from([b"\r\n", b"\n", b"\r\n", b"xx", b""])
trailer = st.sampled_from([b"\r\n", b"X-T: 1\r\n\r\n", b"X-T: 1\r\n"])


@st.composite
def chunked_bodies(draw: st.DrawFn) -> bytes:
    parts = []
    for data, spelling in draw(st.lists(chunk, max_size=8)):
        line = spelling.format(len(data)).encode()
        parts.append(line + b"\r\n" + data + draw(ending))
    parts.append(draw(st.sampled_from([b"0\r\n", b"00\r\n", b"0;x\r\n", b""])) + draw(trailer))
    return b"".join(parts)


@settings(max_examples=600, deadline=None)
@given(chunked_bodies(), st.lists(st.integers(min_value=0), max_size=12))
def test_relayed_reads_hand_on_what_h11_alone_hands_on(body: bytes, cuts: list[int]) -> None:
    reads = _cut(body, cuts)
    assert _relayed(reads) == _layers_only(reads)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120), st.lists(st.integers(min_value=0), max_size=12))
def test_any_bytes_at_all_too(body: bytes, cuts: list[int]) -> None:
    reads = _cut(body, cuts)
    assert _relayed(reads) == _layers_only(reads)


def test_whole_chunks_are_read_and_the_last_chunk_is_left_to_the_layers() -> None:
    body = b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n"
    taken = relaychunks.take(body, 0, b"")
    assert taken.pieces == [b"hello", b"abc"]
    assert body[taken.stop :] == b"0\r\n\r\n"
    assert (taken.in_chunk, taken.to_discard) == (0, b"")


def test_a_read_that_ends_inside_a_chunk_or_its_crlf_leaves_the_state_to_go_on_from() -> None:
    inside = relaychunks.take(b"a\r\n0123", 0, b"")
    assert (inside.pieces, inside.stop, inside.in_chunk, inside.to_discard) == (
        [b"0123"],
        7,
        6,
        b"",
    )
    on = relaychunks.take(b"456789\r", inside.in_chunk, inside.to_discard)
    assert (on.pieces, on.stop, on.in_chunk, on.to_discard) == ([b"456789"], 7, 0, b"\n")


def test_what_it_would_not_accept_whole_is_the_layers() -> None:
    for body in (b"5;ext\r\nhello\r\n", b"5 \r\nhello\r\n", b"1" * 17 + b"\r\n", b"5\nhello"):
        taken = relaychunks.take(body, 0, b"")
        assert (taken.pieces, taken.stop) == ([], 0), body
    half = relaychunks.take(b"5\r\nhello\r\nff", 0, b"")  # a size line cut by the read
    assert (half.pieces, half.stop) == ([b"hello"], 10)


def test_a_piece_is_framed_as_mitmproxy_frames_it() -> None:
    assert relaychunks.frame(b"hello") == b"5\r\nhello\r\n"
    assert relaychunks.frame(b"x" * 255) == b"ff\r\n" + b"x" * 255 + b"\r\n"
