"""Attack round on where a client leg's read is cut for h2 (`relayh2.layers_end`, D740):
a hostile HTTP/2 client's bytes cut across reads anywhere, the relay off and on, the same
outcome.

With `--body-relay`, a client read that is not relayed goes to mitmproxy's layers as h2's
rest of the preface, then up to the last complete frame of what h2 holds and the read;
the rest waits in `_pending_frames` (relayh2up._to_layers). Each test here opens an
`h2`-only tunnel through a proxy run with the relay off and on (`body_relay`, the
`h2_proxy` fixture of test_relay_h2_upload_attack_e2e.py), builds the connection's bytes
with a real h2 client whose writes are held (`_Held`), cuts them where the attack says
and writes each piece as its own TLS record (one read at the proxy), then asserts what
the client saw (statuses, stream ends, resets, GOAWAY codes, PING acks, the close), what
nginx kept (`POST /upload`: status, sha256) and the audit lines (status, `bytes_sent`):
pinned, so the relay off and on must give the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import socket
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from testbed import nginx
from testbed.h2stream import H2Stream
from tests.e2e.clients.test_relay_h2_e2e import AUTHORITY, _relayed
from tests.e2e.clients.test_relay_h2_upload_attack_e2e import _frame, _Held, files, h2_proxy
from tests.e2e.clients.test_relay_h2_upload_attack_e2e import _watch as _watch_upload
from tests.e2e.conftest import PrivateProxy
from tests.e2e.memory_support import h2_request, h2_tunnel

pytestmark = [pytest.mark.netns, pytest.mark.slow]

__all__ = ["files", "h2_proxy"]  # the fixtures, reused

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
LIMIT = 1 << 17  # mitmproxy's max_inbound_frame_size (and the SETTINGS it sends)
DATA, HEADERS, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 8, 9
END_STREAM, END_HEADERS, PADDED = 0x1, 0x4, 0x8
PAUSE = 0.03  # between two writes: each its own read at the proxy


def _client(sock: socket.socket) -> tuple[H2Stream, _Held, bytes]:
    """A client whose writes are held, and its preface and SETTINGS (not yet sent)."""
    held = _Held(sock)
    client = H2Stream(held)  # type: ignore[arg-type]  # a socket for what H2Stream uses
    return client, held, held.take()


def _headers(client: H2Stream, held: _Held, size: int, split: int | None = None) -> bytes:
    """The HEADERS of a new `POST /upload` of `size` bytes (the client's h2 opens the
    stream), or a HEADERS without END_HEADERS whose block ends at `split` and one
    CONTINUATION with the rest."""
    sid = client.conn.get_next_available_stream_id()
    client.conn.send_headers(
        sid, h2_request(AUTHORITY, "POST", "/upload", ("content-length", str(size)))
    )
    client._flush()
    frame = held.take()
    assert frame[3] == HEADERS and frame[4] == END_HEADERS and len(frame) == 9 + _length(frame)
    if split is None:
        return frame
    block = frame[9:]
    return _frame(HEADERS, 0, sid, block[:split]) + _frame(
        CONTINUATION, END_HEADERS, sid, block[split:]
    )


def _length(frame: bytes) -> int:
    return int.from_bytes(frame[:3])


def _body(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _data(sid: int, body: bytes, size: int, end: bool = True, pad: int | None = None) -> bytes:
    """`body` in DATA frames of `size` bytes (padded with `pad` when given), then an empty
    END_STREAM frame when `end`."""
    out = bytearray()
    for at in range(0, len(body), size):
        part = body[at : at + size]
        if pad is None:
            out += _frame(DATA, 0, sid, part)
        else:
            out += _frame(DATA, PADDED, sid, bytes([pad]) + part + b"\0" * pad)
    if end:
        out += _frame(DATA, END_STREAM, sid, b"")
    return bytes(out)


def _ping(payload: bytes = b"12345678") -> bytes:
    return _frame(PING, 0, 0, payload)


def _pieces(wire: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`wire` cut at `cuts` (offsets, any order, out-of-range ones dropped)."""
    at, out = 0, []
    for cut in sorted({c for c in cuts if 0 < c < len(wire)}):
        out.append(wire[at:cut])
        at = cut
    out.append(wire[at:])
    return out


def _every(start: int, step: int, end: int) -> list[int]:
    return list(range(start, end, step))


def _send(sock: socket.socket, pieces: Iterable[bytes], pause: float = PAUSE) -> None:
    for piece in pieces:
        sock.sendall(piece)
        time.sleep(pause)


def _watch(sock: socket.socket, client: H2Stream, ends: int, within: float = 5) -> list[object]:
    """The upload attack round's `_watch`, every event listed (resets end a stream)."""
    return _watch_upload(sock, client, ends, within, every=True)


def _kept(nginx_upstream: nginx.Nginx, mark: int, count: int) -> list[tuple[int, str | None]]:
    """nginx's `/upload` lines since `mark` (waiting for `count` of them): status and the
    sha256 of the body it kept (None: none), sorted; the kept files removed."""
    if count:
        lines = nginx_upstream.lines_for(mark, "/upload", count, timeout=10)
    else:
        time.sleep(0.5)
        lines = [x for x in nginx_upstream.since(mark) if x["uri"] == "/upload"]
    kept = []
    for line in lines:
        path = Path(line["body_file"]) if line["body_file"] else None
        data = path.read_bytes() if path is not None and path.exists() else None
        if path is not None:
            path.unlink(missing_ok=True)
        kept.append((line["status"], _sha(data) if data else None))
    return sorted(kept, key=repr)


def _audits(p: PrivateProxy, mark: int, count: int) -> list[tuple[object, object]]:
    """The audit lines of `/upload` since `mark` (waiting up to 10 s for `count`, then
    0.3 s more for any extra): status and `bytes_sent`, sorted."""
    deadline = time.monotonic() + 10
    while True:
        lines = [a for a in p.view.audit_log.since(mark) if a.get("path") == "/upload"]
        if len(lines) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    lines = [a for a in p.view.audit_log.since(mark) if a.get("path") == "/upload"]
    return sorted(((a["status"], a["bytes_sent"]) for a in lines), key=repr)


def _relay_carried(p: PrivateProxy, body_relay: bool, before: int | None) -> bool:
    """Whether the relay carried any of the upload (always True with the relay off, which
    carries nothing by definition: /status has no count)."""
    after = _relayed(p)
    if not body_relay:
        assert after is None
        return True
    assert after is not None and before is not None
    return after > before


# --- the connection preface cut across reads ----------------------------------------

PREFACE_CUTS = {
    "1": [1],
    "23": [23],
    "24": [24],
    "24+1": [25],
    "inside-settings-header": [24 + 5],
    "inside-settings-payload": [24 + 9 + 2],
    "byte-by-byte-to-the-headers": list(range(1, 40)),
    "1-then-inside-headers-header": [1, -5],  # -5: five bytes before the HEADERS' end
}


@pytest.mark.parametrize("case", list(PREFACE_CUTS))
def test_an_upload_after_a_preface_cut_across_reads_arrives_whole(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, case: str
) -> None:
    """The preface and the SETTINGS cut anywhere (a byte, 23, 24+partial SETTINGS, byte
    by byte), the body after in 16 KiB records straddling 16 KiB frames: 200, nginx keeps
    the body, the audit counts it, and the relay carries part of it when on."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    body = _body(10 * 16384 + 1000, 1)
    before = _relayed(p)
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        head = opening + _headers(client, held, len(body))
        wire = head + _data(1, body, 16384)
        cuts = [c if c > 0 else len(head) + c for c in PREFACE_CUTS[case]]
        cuts += _every(len(head) + 16384, 16384, len(wire))
        _send(conn.sock, _pieces(wire, cuts))
        held.holding = False
        seen = _watch(conn.sock, client, ends=1)
    outcome = (seen, _kept(nginx_upstream, mark, 1), _audits(p, audit_mark, 1))
    assert outcome == (["1 200", "ended 1"], [(200, _sha(body))], [(200, len(body))]), outcome
    assert _relay_carried(p, body_relay, before)


BAD_PREFACES = {
    "bad-first-byte-alone": (b"X" + PREFACE[1:], [1]),
    "bad-last-byte-after-23": (PREFACE[:23] + b"X", [23]),
    "bad-byte-in-second-read": (PREFACE[:16] + b"\r\nXM\r\n\r\n", [16]),
    "bad-byte-after-a-good-byte-by-byte-start": (PREFACE[:10] + b"Y" + PREFACE[11:], range(1, 12)),
}


@pytest.mark.parametrize("case", list(BAD_PREFACES))
def test_a_bad_preface_cut_across_reads_is_refused_alike(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, case: str
) -> None:
    """A preface wrong in one byte, that byte in a read of its own or after good ones:
    GOAWAY PROTOCOL_ERROR and the close, nothing reaches nginx, no audit line."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    preface, cuts = BAD_PREFACES[case]
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        wire = preface + opening[24:] + _headers(client, held, 5) + _data(1, b"hello", 5)
        _send(conn.sock, _pieces(wire, cuts))
        held.holding = False
        seen = _watch(conn.sock, client, ends=1, within=3)
    outcome = (seen, _kept(nginx_upstream, mark, 0), _audits(p, audit_mark, 0))
    assert outcome == (["PROTOCOL_ERROR", None], [], []), outcome


# --- a first read (which h2 takes whole) ending inside a frame header ---------------


@pytest.mark.parametrize(
    ("kind", "k"),
    [
        ("data", 1),
        ("data", 4),
        ("data", 8),
        ("headers", 1),
        ("headers", 8),
        ("continuation", 1),
        ("continuation", 8),
    ],  # fmt: skip
)
def test_a_first_read_ending_inside_a_frame_header_loses_nothing(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, kind: str, k: int
) -> None:
    """The client's first record (the preface, SETTINGS, HEADERS: h2 takes it whole, the
    relay's route not yet there) ends `k` bytes into the header of a DATA frame, of a
    second stream's HEADERS, or of a CONTINUATION; the rest follows in 16 KiB records
    that straddle the frames. Every body whole at nginx, 200 each."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    one, two = _body(6 * 16384 + 77, 2), _body(3 * 16384 + 5, 3)
    uploads = 2 if kind == "headers" else 1
    before = _relayed(p)
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        if kind == "continuation":
            first = opening + _headers(client, held, len(one), split=7)
            wire = first + _data(1, one, 16384)
            cut = len(opening) + 9 + 7 + k  # into the CONTINUATION's header
        elif kind == "headers":
            first = (
                opening + _headers(client, held, len(one)) + _data(1, one[:16384], 16384, end=False)
            )
            second = _headers(client, held, len(two))
            wire = first + second + _data(1, one[16384:], 16384) + _data(3, two, 16384)
            cut = len(first) + k
        else:
            first = opening + _headers(client, held, len(one))
            wire = first + _data(1, one, 16384)
            cut = len(first) + k
        _send(conn.sock, _pieces(wire, [cut, *_every(cut + 16384, 16384, len(wire))]))
        held.holding = False
        seen = _watch(conn.sock, client, ends=uploads)
    outcome = (sorted(map(str, seen)), _kept(nginx_upstream, mark, uploads),
               _audits(p, audit_mark, uploads))  # fmt: skip
    bodies = [one, two][:uploads]
    streams = [1, 3][:uploads]
    assert outcome == (
        sorted([*(f"{s} 200" for s in streams), *(f"ended {s}" for s in streams)]),
        sorted(((200, _sha(b)) for b in bodies), key=repr),
        sorted(((200, len(b)) for b in bodies), key=repr),
    ), outcome
    assert _relay_carried(p, body_relay, before)


# --- a header block held by h2 while the reads around it carry DATA -----------------


@pytest.mark.parametrize("hostile", [False, True], ids=["continuations", "data-inside-the-block"])
def test_a_header_block_cut_across_reads_amid_another_streams_data(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, hostile: bool
) -> None:
    """Stream 1's upload under way (its reads relayable), then stream 3's HEADERS without
    END_HEADERS and two CONTINUATIONs, each cut across reads, stream 1's DATA in the same
    reads right before and after the block; both bodies whole. Hostile: a DATA frame of
    stream 1 inside the block, cut across two reads: PROTOCOL_ERROR, alike."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    one, two = _body(8 * 16384, 4), _body(2 * 16384 + 3, 5)
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        first = opening + _headers(client, held, len(one))
        early = _data(1, one[: 4 * 16384], 16384, end=False)
        block = _headers(client, held, len(two))[9:]
        heads = (_frame(HEADERS, 0, 3, block[:5]), _frame(CONTINUATION, 0, 3, block[5:9]),
                 _frame(CONTINUATION, END_HEADERS, 3, block[9:]))  # fmt: skip
        inside = _frame(DATA, 0, 1, one[4 * 16384 : 4 * 16384 + 100]) if hostile else b""
        later = _data(1, one[4 * 16384 + (100 if hostile else 0) :], 16384)
        rest = _data(3, two, 16384)
        wire = first + early + heads[0] + inside + heads[1] + heads[2] + later + rest
        at = len(first + early)
        cuts = [len(first), *_every(len(first) + 16384 + 9, 16384 + 9, at - 16393 + 1)]
        cuts += [at - 100, at + len(heads[0]) + 5]  # DATA and HEADERS, then 5 of a header
        if hostile:
            cuts += [at + len(heads[0]) + 50]  # the DATA inside the block, cut
        if hostile:  # nothing after the refused frame (a write after the close resets)
            wire = wire[: at + len(heads[0]) + len(inside)]
        mid = at + len(heads[0]) + len(inside) + len(heads[1])
        cuts += [mid + 4, mid + len(heads[2]) + 300, *_every(mid + 20000, 16384, len(wire))]
        _send(conn.sock, _pieces(wire, cuts))
        held.holding = False
        seen = _watch(conn.sock, client, ends=1 if hostile else 2)
    uploads = 1 if hostile else 2
    events = seen if hostile else sorted(map(str, seen))  # two streams: either order
    outcome = (events, _kept(nginx_upstream, mark, uploads), _audits(p, audit_mark, uploads))
    if hostile:  # h2's GOAWAY, mitmproxy's, the close; stream 1 cut after its 4 frames
        assert outcome == (["PROTOCOL_ERROR", "PROTOCOL_ERROR", None], [(499, None)],
                           [(None, 4 * 16384)]), outcome  # fmt: skip
    else:
        assert outcome == (
            ["1 200", "3 200", "ended 1", "ended 3"],
            sorted([(200, _sha(one)), (200, _sha(two))], key=repr),
            sorted([(200, len(one)), (200, len(two))], key=repr),
        ), outcome


# --- a frame whose header announces more than the maximum, in pieces ---------------

OVERSIZED_KINDS = {"data": (DATA, 1), "headers": (HEADERS, 3), "ping": (PING, 0),
                   "unknown": (0xFA, 0), "continuation": (CONTINUATION, 3)}  # fmt: skip
OVERSIZED_CUTS = {
    "1+8": ("alone", [1]),
    "3+6": ("alone", [3]),
    "8+1": ("alone", [8]),
    "4-at-a-relayable-reads-end+5": ("tail", [4]),
    "after-a-frame-h2-held+5+4": ("held", [5]),
    "1+1+...+1-then-payload": ("alone", [1, 2, 3, 4, 5, 6, 7, 8]),
}


OVERSIZED = [
    *(("data", cut) for cut in OVERSIZED_CUTS),
    *(("headers", cut) for cut in ("1+8", "4-at-a-relayable-reads-end+5", "after-a-frame-h2-held+5+4")),
    *(("unknown", cut) for cut in ("3+6", "4-at-a-relayable-reads-end+5", "after-a-frame-h2-held+5+4",
                                   "1+1+...+1-then-payload")),
    *(("continuation", cut) for cut in ("1+8", "4-at-a-relayable-reads-end+5",
                                        "after-a-frame-h2-held+5+4")),
    ("ping", "8+1"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "cut"), OVERSIZED)
def test_an_oversized_frame_header_in_pieces_is_refused_once_whole(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, kind: str, cut: str
) -> None:
    """Stream 1's upload under way, then a frame (DATA, a new stream's HEADERS, an
    unknown type, a CONTINUATION of a header block h2 holds, a PING) whose header
    announces the maximum + 1, its 9 header bytes cut across reads: alone, at the end of
    a relayable read, in the read that completes a frame h2 held from the first read.
    Until the header is whole the proxy says nothing; once it is, GOAWAY
    FRAME_SIZE_ERROR and the close within a second, never held."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    where, splits = OVERSIZED_CUTS[cut]
    ftype, fsid = OVERSIZED_KINDS[kind]
    body = _body(3 * 16384, 6)
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        first = opening + _headers(client, held, 1 << 20)
        data = _data(1, body, 16384, end=False)
        lead = b""  # before a CONTINUATION: a HEADERS without END_HEADERS, h2 holds it
        if kind == "continuation":
            lead = _frame(HEADERS, 0, 3, _headers(client, held, 5)[9:][:5])
        big = lead + _frame(ftype, 0, fsid, b"", length=LIMIT + 1)
        splits = [len(lead) + x for x in splits]
        if where == "held":  # the first read ends inside the only DATA frame
            data = data[:16393]
            pieces = [first + data[:1000], data[1000:] + big[: splits[0]]]
        elif where == "tail":
            pieces = [first, *_pieces(data, [16393, 2 * 16393])]
            pieces[-1] += big[: splits[0]]
        else:
            pieces = [first, *_pieces(data, [16393, 2 * 16393]), big[: splits[0]]]
        pieces += [big[a:b] for a, b in zip(splits, splits[1:], strict=False)]
        _send(conn.sock, pieces, pause=0.1)
        # The client's own writes stay held (its SETTINGS ACK would land inside the frame).
        quiet = _watch(conn.sock, client, ends=1, within=0.5)
        started = time.monotonic()
        conn.sock.sendall(big[splits[-1] :] + b"\0" * 100)
        seen = _watch(conn.sock, client, ends=1, within=3)
        took = time.monotonic() - started
    outcome = (quiet, seen, _kept(nginx_upstream, mark, 1), _audits(p, audit_mark, 1))
    # h2's GOAWAY, then mitmproxy's; nginx's stream cut (499, nothing kept); the audit
    # counts every DATA byte before the refused frame.
    sent = 16384 if where == "held" else len(body)
    refused = ["FRAME_SIZE_ERROR", "PROTOCOL_ERROR", None]
    assert outcome == ([], refused, [(499, None)], [(None, sent)]), outcome
    assert took < 1, took


# --- a frame of the maximum, held unfinished ------------------------------------------


@pytest.mark.parametrize("end", ["finished", "client-leaves"])
def test_a_frame_of_the_maximum_held_unfinished_then_finished_or_left(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, end: str
) -> None:
    """A DATA frame announcing exactly the maximum (128 KiB), its header cut 1+8, its
    payload in 16 KiB records, all but its last byte; 1.5 s of nothing (the proxy holds
    one frame, answers nothing, closes nothing). Then the last byte and END_STREAM: 200
    and the body whole; or the client closes: the upload ends alike."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    body = _body(LIMIT, 7)
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        first = opening + _headers(client, held, LIMIT)
        frame = _frame(DATA, 0, 1, body)
        pieces = [first, frame[:1], *_pieces(frame[1:-1], [8, *_every(8 + 16384, 16384, LIMIT)])]
        _send(conn.sock, pieces)
        # The client's own writes stay held (its SETTINGS ACK would land inside the frame).
        quiet = _watch(conn.sock, client, ends=1, within=1.5)
        if end == "finished":
            _send(conn.sock, [frame[-1:], _frame(DATA, END_STREAM, 1, b"") + held.take()])
            held.holding = False
            seen = _watch(conn.sock, client, ends=1)
        else:
            seen = []
    outcome = (quiet, seen, _kept(nginx_upstream, mark, 1), _audits(p, audit_mark, 1))
    if end == "finished":
        assert outcome == ([], ["1 200", "ended 1"], [(200, _sha(body))], [(200, LIMIT)]), outcome
    else:
        assert outcome == ([], [], [(499, None)], [(None, 0)]), outcome


# --- frames straddling reads: padding, END_STREAM, RST_STREAM, control frames --------


def _padded(sid: int, body: bytes, size: int, end: bool = True) -> bytes:
    """`body` in padded DATA frames of `size` bytes, the pad length varying 0-255, the
    last frame carrying END_STREAM when `end` (a padded frame: its own padding)."""
    out, frames = bytearray(), range(0, len(body), size)
    for n, at in enumerate(frames):
        pad = (n * 97 + 13) % 256
        flags = PADDED | (END_STREAM if end and at == frames[-1] else 0)
        out += _frame(DATA, flags, sid, bytes([pad]) + body[at : at + size] + b"\0" * pad)
    return bytes(out)


STRADDLING = [
    "padded-end-stream-completes-the-frame-h2-held",
    "padded-frames-cut-every-7777",
    "end-stream-frame-completes-a-relayed-reads-tail",
    "control-frames-cut-between-data",
    "reset-cut-mid-upload-then-another-upload",
]


@pytest.mark.parametrize("case", STRADDLING)
def test_frames_straddling_reads_end_as_with_the_layers(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, case: str
) -> None:
    """Padded DATA (END_STREAM on the padded frame that completes the one h2 held from
    the first read; every frame padded, cut at odd offsets); the END_STREAM frame
    completing a relayed read's left part; PING, WINDOW_UPDATE and SETTINGS each cut
    between DATA frames (every PING acked, in order); RST_STREAM cut mid-upload, then
    another upload on the connection. Pinned outcome, the relay off and on."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    body, other = _body(6 * 16384 + 999, 8), _body(20000, 9)
    if case == "padded-end-stream-completes-the-frame-h2-held":
        body = body[:3000]
    uploads, ends = 1, 1
    with h2_tunnel(p, AUTHORITY) as conn:
        client, held, opening = _client(conn.sock)
        first = opening + _headers(client, held, len(body))
        if case == "padded-end-stream-completes-the-frame-h2-held":
            wire = first + _padded(1, body, 16384)
            cuts = [len(first) + 100]
        elif case == "padded-frames-cut-every-7777":
            wire = first + _padded(1, body, 5000)
            cuts = [len(first), *_every(len(first) + 7777, 7777, len(wire))]
        elif case == "end-stream-frame-completes-a-relayed-reads-tail":
            wire = first + _data(1, body[:-999], 16384, end=False)
            wire += _frame(DATA, END_STREAM, 1, body[-999:])
            cuts = [len(first), *_every(len(first) + 16393, 16393, len(wire)), len(wire) - 500]
        elif case == "control-frames-cut-between-data":
            controls = [_ping(b"ping-one"), _frame(WINDOW_UPDATE, 0, 0, (1000).to_bytes(4)),
                        _frame(SETTINGS, 0, 0, (4).to_bytes(2) + (1 << 20).to_bytes(4)),
                        _ping(b"ping-two"), _frame(WINDOW_UPDATE, 0, 1, (7).to_bytes(4))]  # fmt: skip
            wire, cuts = bytearray(first), [len(first)]
            for n, at in enumerate(range(0, len(body), 16384)):
                wire += _frame(DATA, 0, 1, body[at : at + 16384])
                cuts.append(len(wire) - 3)  # 3 bytes of DATA with the control frame
                if n < len(controls):
                    wire += controls[n]
                    cuts.append(len(wire) - len(controls[n]) + 4 + n)  # cut inside it
            wire += _frame(DATA, END_STREAM, 1, b"")
            wire = bytes(wire)
        else:  # reset
            uploads, ends = 2, 2
            wire = first + _data(1, body[: 4 * 16384], 16384, end=False)
            wire += _frame(RST_STREAM, 0, 1, (8).to_bytes(4))  # CANCEL
            cuts = [len(first), *_every(len(first) + 16393, 16393, len(wire) - 13), len(wire) - 8]
            second = _headers(client, held, len(other))
            cuts += [len(wire) + 5]  # the next stream's HEADERS cut too
            wire += second + _data(3, other, 16384)
            cuts += [len(wire) - 9 - 3000]
        _send(conn.sock, _pieces(wire, cuts))
        held.holding = False
        conn.sock.sendall(held.take())  # the client's own writes (SETTINGS ACK) after
        seen = _watch(conn.sock, client, ends=ends)
    outcome = (seen, _kept(nginx_upstream, mark, uploads), _audits(p, audit_mark, uploads))
    if case == "control-frames-cut-between-data":
        expected = ["ping ack b'ping-one'", "ping ack b'ping-two'", "1 200", "ended 1"]
    elif case.startswith("reset"):
        expected = ["3 200", "ended 3"]
    else:
        expected = ["1 200", "ended 1"]
    if case.startswith("reset"):
        # the reset stream: nginx 499, nothing kept, the audit its 4 frames
        assert outcome == (expected, sorted([(499, None), (200, _sha(other))], key=repr),
                           sorted([(None, 4 * 16384), (200, len(other))], key=repr)), outcome  # fmt: skip
    else:
        assert outcome == (expected, [(200, _sha(body))], [(200, len(body))]), outcome


# --- two streams: a read completes stream A's frame h2 held, then carries B's DATA ----


@pytest.mark.parametrize("alpn", ["h2", "h2,http/1.1"])
def test_a_read_completing_one_streams_held_frame_then_carrying_anothers_data(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, alpn: str
) -> None:
    """The first record (h2 takes it whole) holds both streams' HEADERS and ends 5000
    bytes into stream A's first DATA frame; the next completes it and carries two of B's
    frames and 100 bytes of a third; then B's frames alone (relayable), A's alone, both
    ends. Both bodies whole, 200 each; the relay carries part of them. Both stacks: an
    `h2`-only client, and one offering `http/1.1` too (the upstream opened first)."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    a_body, b_body = _body(5 * 16384 + 11, 10), _body(7 * 16384 + 22, 11)
    before = _relayed(p)
    with p.view.tunnel(AUTHORITY, alpn=alpn.split(",")) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"
        client, held, opening = _client(conn.sock)
        first = opening + _headers(client, held, len(a_body)) + _headers(client, held, len(b_body))
        a_frames = _data(1, a_body, 16384)
        b_frames = _data(3, b_body, 16384)
        wire = first + a_frames[:16393] + b_frames + a_frames[16393:]
        start = len(first)
        cuts = [start + 5000, start + 16393 + 2 * 16393 + 100]
        cuts += _every(cuts[-1] + 16384, 16384, len(wire))
        _send(conn.sock, _pieces(wire, cuts))
        held.holding = False
        conn.sock.sendall(held.take())
        seen = _watch(conn.sock, client, ends=2)
    outcome = (sorted(map(str, seen)), _kept(nginx_upstream, mark, 2), _audits(p, audit_mark, 2))
    assert outcome == (
        ["1 200", "3 200", "ended 1", "ended 3"],
        sorted([(200, _sha(a_body)), (200, _sha(b_body))], key=repr),
        sorted([(200, len(a_body)), (200, len(b_body))], key=repr),
    ), outcome
    assert _relay_carried(p, body_relay, before)


# --- everything at once, cut at random offsets -----------------------------------------


@pytest.mark.parametrize(
    ("seed", "alpn"), [(1, "h2"), (2, "h2"), (3, "h2,http/1.1"), (4, "h2,http/1.1")]
)
def test_a_mixed_connection_cut_at_random_offsets_arrives_whole(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, seed: int, alpn: str
) -> None:
    """Two uploads (the second's HEADERS split into HEADERS + CONTINUATION) whose DATA
    frames of random sizes (some padded, some empty) interleave with PINGs and
    WINDOW_UPDATEs, the whole connection cut into reads at random offsets, half of them
    near a frame boundary: both bodies whole, every PING acked. Both stacks: an `h2`-only
    client (the HTTP layer opens the upstream, D82) and one offering `http/1.1` too (the
    upstream opened first)."""
    rng = random.Random(seed)
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    bodies = {1: _body(rng.randrange(100_000, 300_000), seed * 10),
              3: _body(rng.randrange(50_000, 200_000), seed * 10 + 1)}  # fmt: skip
    with p.view.tunnel(AUTHORITY, alpn=alpn.split(",")) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"
        client, held, opening = _client(conn.sock)
        wire = bytearray(opening + _headers(client, held, len(bodies[1])))
        bounds = [len(wire)]
        at = {1: 0, 3: 0}
        pings = 0
        opened = False
        while at[1] < len(bodies[1]) or at[3] < len(bodies[3]):
            roll = rng.random()
            if not opened and at[1] > 30_000:
                wire += _headers(client, held, len(bodies[3]), split=rng.randrange(1, 20))
                opened = True
            elif roll < 0.08:
                pings += 1
                wire += _ping(b"ping-%03d" % pings)
            elif roll < 0.12:
                wire += _frame(WINDOW_UPDATE, 0, 0, rng.randrange(1, 1 << 16).to_bytes(4))
            else:
                done_1 = at[1] >= len(bodies[1])
                sid = (
                    3 if opened and at[3] < len(bodies[3]) and (done_1 or rng.random() < 0.5) else 1
                )
                if at[sid] >= len(bodies[sid]):
                    continue
                size = rng.choice([0, 1, 100, 8000, 16384, 16384, 30000, 65536])
                part = bodies[sid][at[sid] : at[sid] + size]
                at[sid] += len(part)
                if rng.random() < 0.3:
                    pad = rng.randrange(256)
                    wire += _frame(DATA, PADDED, sid, bytes([pad]) + part + b"\0" * pad)
                else:
                    wire += _frame(DATA, 0, sid, part)
            bounds.append(len(wire))
        wire += _frame(DATA, END_STREAM, 1, b"") + _frame(DATA, END_STREAM, 3, b"")
        cuts = [bounds[0]]
        for _ in range(len(wire) // 9000):
            if rng.random() < 0.5:
                cuts.append(rng.choice(bounds) + rng.randrange(-9, 10))
            else:
                cuts.append(rng.randrange(bounds[0], len(wire)))
        _send(conn.sock, _pieces(bytes(wire), cuts), pause=0.01)
        held.holding = False
        conn.sock.sendall(held.take())
        seen = _watch(conn.sock, client, ends=2, within=10)
    acks = [x for x in seen if str(x).startswith("ping ack")]
    rest = sorted(str(x) for x in seen if not str(x).startswith("ping ack"))
    outcome = (acks, rest, _kept(nginx_upstream, mark, 2), _audits(p, audit_mark, 2))
    assert outcome == (
        [f"ping ack {b'ping-%03d' % n!r}" for n in range(1, pings + 1)],
        ["1 200", "3 200", "ended 1", "ended 3"],
        sorted([(200, _sha(bodies[1])), (200, _sha(bodies[3]))], key=repr),
        sorted([(200, len(bodies[1])), (200, len(bodies[3]))], key=repr),
    ), outcome


# --- many clients, each holding an unfinished frame of the maximum ---------------------


def test_many_connections_each_holding_an_unfinished_frame_hold_one_frame_each(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """20 connections, each with an upload whose one DATA frame announces the maximum
    (128 KiB) and is sent but for its last byte, in 16 KiB records: the proxy's memory
    grows by about one frame per connection (well under 16 MiB for all 20, whichever
    holds it, h2 or `_pending_frames`), and answers none of them; then each frame's last
    byte and END_STREAM: 20 uploads whole, 200 each."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    count = 20
    bodies = [_body(LIMIT, 100 + n) for n in range(count)]
    frames = [_frame(DATA, 0, 1, body) for body in bodies]
    baseline = p.process.status_kib("VmRSS")
    with contextlib.ExitStack() as stack:
        open_ = []
        for frame in frames:
            conn = stack.enter_context(h2_tunnel(p, AUTHORITY))
            client, held, opening = _client(conn.sock)
            first = opening + _headers(client, held, LIMIT)
            _send(conn.sock, [first, *_pieces(frame[:-1], _every(16384, 16384, len(frame)))], 0.005)
            open_.append((conn, client, held))
        time.sleep(0.5)
        growth_mib = (p.process.status_kib("VmRSS") - baseline) / 1024
        quiet = [_watch(conn.sock, client, ends=1, within=0.05) for conn, client, _ in open_]
        seen = []
        for (conn, _, held), frame in zip(open_, frames, strict=True):
            conn.sock.sendall(frame[-1:] + _frame(DATA, END_STREAM, 1, b"") + held.take())
            held.holding = False
        for conn, client, _ in open_:
            seen.append(_watch(conn.sock, client, ends=1))
    outcome = (quiet, seen, _kept(nginx_upstream, mark, count), _audits(p, audit_mark, count))
    assert outcome == (
        [[]] * count,
        [["1 200", "ended 1"]] * count,
        sorted(((200, _sha(b)) for b in bodies), key=repr),
        [(200, LIMIT)] * count,
    ), outcome
    assert growth_mib < 16, growth_mib
