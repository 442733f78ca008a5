"""Attack round on the HTTP/2 upload relay (issue 49, D660-D665): a hostile client's raw
frames, the relay off and on, the same outcome.

Each test opens an `h2`-only tunnel through a proxy run with `--body-relay` off and on
(`body_relay`), writes frames by hand over the TLS socket (one `sendall` is one TLS
record, so one read at the proxy), and asserts what the client sees and what nginx kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import select
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import h2.errors
import h2.events
import h2.exceptions
import pytest

from testbed import nginx
from testbed.h2stream import H2Stream
from tests.e2e.clients.test_relay_h2_e2e import AUTHORITY, CONFIG, _curl, _relayed, files
from tests.e2e.conftest import PrivateProxy, relaying
from tests.e2e.memory_support import h2_request, h2_tunnel

MIB = 1 << 20
pytestmark = [pytest.mark.netns, pytest.mark.slow]

__all__ = ["files"]  # the module fixture, reused


@pytest.fixture
def h2_proxy(
    private_proxy: Callable[..., PrivateProxy],
    nginx_upstream: nginx.Nginx,
    files: Path,
    body_relay: bool,
) -> PrivateProxy:
    p = relaying(private_proxy, body_relay)("relay-h2-attack", CONFIG)
    _curl(p, "/small.txt", Path("/dev/null"))
    return p


def _frame(kind: int, flags: int, stream: int, payload: bytes, length: int | None = None) -> bytes:
    size = len(payload) if length is None else length
    return struct.pack(">HBBBL", size >> 8, size & 0xFF, kind, flags, stream) + payload


def _closed_with(sock: socket.socket, client: H2Stream, within: float) -> list[object]:
    """The h2 events the proxy sent until it closed the connection (then None ends the
    list), or until `within` seconds passed (the list ends without None)."""
    seen: list[object] = []
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            break
        try:
            chunk = sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            seen.append(None)
            break
        try:
            found = client.conn.receive_data(chunk)
        except h2.exceptions.ProtocolError:  # what the proxy sends after its GOAWAY
            continue
        for event in found:
            if type(event) is h2.events.ConnectionTerminated:
                seen.append(h2.errors.ErrorCodes(event.error_code).name)
            elif type(event) is h2.events.StreamReset:
                seen.append(f"reset {h2.errors.ErrorCodes(event.error_code).name}")
    return seen


@pytest.mark.parametrize("cut", [None, 5], ids=["header-whole", "header-split"])
def test_an_oversized_frame_after_a_relayed_data_frame_is_refused_at_once(
    h2_proxy: PrivateProxy, body_relay: bool, cut: int | None
) -> None:
    """One read brings a whole DATA frame and the header of a DATA frame announcing 16 MiB
    (over the proxy's 16 KiB maximum) with a little of its payload: h2 refuses such a frame
    from its header alone, so the proxy must close the connection at once (GOAWAY
    FRAME_SIZE_ERROR), the relay on as off, and never hold the half frame waiting for more."""
    p = h2_proxy
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(10)
        client = H2Stream(conn.sock)
        sid = client.open(h2_request(AUTHORITY, "POST", "/upload", ("content-length", "5000")))
        time.sleep(0.5)  # the upstream connects and takes the headers: the body streams
        reads = _frame(0, 0, sid, b"a" * 1000) + _frame(0, 0, sid, b"b" * 100, length=0xFFFFFF)
        if cut is not None:  # the relayed frame and 5 bytes of the header; then the rest
            conn.sock.sendall(reads[: 1009 + cut])
            time.sleep(0.3)
            reads = reads[1009 + cut :]
        conn.sock.sendall(reads)
        seen = _closed_with(conn.sock, client, within=5)
    # Closed at once, not holding the frame for 16 MiB more (D660; before: nothing, relay
    # off or on, until the idle timeout).
    assert seen == ["FRAME_SIZE_ERROR", "PROTOCOL_ERROR", None], seen  # h2, then mitmproxy


def _audits(p: PrivateProxy, mark: int) -> list[dict]:
    return [a for a in p.view.audit_log.since(mark) if a.get("path") == "/upload"]


def _padded(sid: int, data: bytes, pad: int, flags: int = 0) -> bytes:
    return _frame(0, flags | 0x8, sid, bytes([pad]) + data + b"\0" * pad)


def _wire(k: int, sid: int) -> tuple[bytes, bytes]:
    """Upload `k`'s body and its DATA frames: unflagged (relayable), padded (pad length 0
    and equal to the payload), zero-length."""
    parts = [f"{k:04d}".encode() + b"a" * (97 + k), b"p" * k, b"", b"q" * 7, b"b" * 300, b"z"]
    wire = (
        _frame(0, 0, sid, parts[0])
        + _padded(sid, parts[1], 0)
        + _frame(0, 0, sid, parts[2])
        + _padded(sid, parts[3], len(parts[3]))
        + _frame(0, 0, sid, parts[4])
        + _frame(0, 0, sid, parts[5])
    )  # then END_STREAM on an empty DATA frame, through the client's h2 (its stream closes)
    return b"".join(parts), wire


def test_a_hundred_and_twenty_uploads_of_odd_frames_cut_anywhere_on_one_connection(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """120 uploads one after the other on one connection (client stream ids 1..239, mapped
    to the upstream's), each body in DATA frames unflagged, padded, empty and ending the
    stream, its bytes cut in two reads at a different offset each time (a partial frame
    header, a partial payload, the last frame alone): nginx keeps exactly each body, each
    gets 200 and its audit line counts its bytes, relay off and on; with it on some of
    them were relayed."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    before = _relayed(p) or 0
    bodies: dict[str, int] = {}
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(30)
        client = H2Stream(conn.sock)
        for k in range(120):
            sid = client.conn.get_next_available_stream_id()
            body, wire = _wire(k, sid)
            length = ("content-length", str(len(body)))
            assert client.open(h2_request(AUTHORITY, "POST", "/upload", length)) == sid
            bodies[hashlib.sha256(body).hexdigest()] = len(body)
            time.sleep(0.03)  # the upstream takes the headers: the first frames may relay
            first = 9 + 101 + k  # the first frame alone, relayable; the rest cut anywhere
            conn.sock.sendall(wire[:first])
            time.sleep(0.01)
            cut = first + (k * 37) % (len(wire) - first)
            conn.sock.sendall(wire[first:cut])
            time.sleep(0.01)
            conn.sock.sendall(wire[cut:])
            client.conn.end_stream(sid)
            client._flush()
            outcome = client.read_response(sid)
            assert (outcome.status, outcome.ended) == ("200", True), (k, outcome)
    kept: dict[str, int] = {}
    for line in nginx_upstream.lines_for(mark, "/upload", len(bodies)):
        if line["uri"] == "/upload":
            assert (line["proto"], line["status"]) == ("HTTP/2.0", 200), line
            data = Path(line["body_file"]).read_bytes()
            Path(line["body_file"]).unlink()
            kept[hashlib.sha256(data).hexdigest()] = len(data)
    assert kept == bodies
    deadline = time.monotonic() + 10
    while len(audits := _audits(p, audit_mark)) < 120 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted((a["status"], a["bytes_sent"]) for a in audits) == sorted(
        (200, size) for size in bodies.values()
    )
    carried = (_relayed(p) or 0) - before
    assert (carried > 0) if body_relay else (carried == 0), carried


def _watch(
    sock: socket.socket, client: H2Stream, ends: int, within: float = 3, *, every: bool = False
) -> list[object]:
    """What the proxy sent, as text, until it closed the connection (None), `ends` streams
    ended, or `within` seconds passed. With `every` (the split attack round, D741), a reset
    stream counts as ended too, and PING acks and the client's own protocol errors are
    listed (the client's answers, SETTINGS acks, go out as it reads)."""
    seen: list[object] = []
    deadline = time.monotonic() + within
    done = 0
    while (left := deadline - time.monotonic()) > 0 and done < ends:
        if not select.select([sock], [], [], left)[0]:
            break
        try:
            chunk = sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            seen.append(None)
            break
        try:
            found = client.conn.receive_data(chunk)
        except h2.exceptions.ProtocolError as e:
            if every:
                seen.append(f"client: {type(e).__name__}")
            continue
        with contextlib.suppress(OSError):  # the proxy may have closed already
            client._flush()
        for e in found:
            if type(e) is h2.events.ConnectionTerminated:
                seen.append(h2.errors.ErrorCodes(e.error_code).name)
            elif type(e) is h2.events.StreamReset:
                seen.append(f"reset {e.stream_id} {h2.errors.ErrorCodes(e.error_code).name}")
                done += every
            elif type(e) is h2.events.ResponseReceived:
                seen.append(f"{e.stream_id} {dict(e.headers)[':status']}")
            elif type(e) is h2.events.StreamEnded:
                seen.append(f"ended {e.stream_id}")
                done += 1
            elif every and type(e) is h2.events.PingAckReceived:
                seen.append(f"ping ack {e.ping_data!r}")
    return seen


def _ping(payload: bytes = b"12345678") -> bytes:
    return _frame(6, 0, 0, payload)


# Each case: (what the client sends on stream 1, content-length 1000, after a relayable
# 100-byte DATA frame read on its own; each bytes a read), the streams it then opens.
_A, _B = b"a" * 100, b"b" * 900
CASES: dict[str, list[bytes]] = {
    "more-than-declared": [_frame(0, 0, 1, _B + b"x")],
    "less-then-end": [_frame(0, 0x1, 1, b"")],
    "pad-over-payload": [_frame(0, 0x8, 1, bytes([200]) + b"abcd")],
    "data-on-an-even-stream": [_frame(0, 0, 2, b"x" * 10)],
    "data-on-stream-0": [_frame(0, 0, 0, b"x" * 10)],
    "data-on-an-unopened-stream": [_frame(0, 0, 5, b"x" * 10)],
    "data-after-end": [_frame(0, 0x1, 1, _B), _frame(0, 0, 1, b"late")],
    "reset-mid-upload": [_frame(0, 0, 1, _B[:400]), _frame(3, 0, 1, (8).to_bytes(4))],
    "control-frames-amid-data": [
        _frame(0, 0, 1, _B[:300]) + _ping() + _frame(0, 0, 1, _B[300:600])
        + _frame(8, 0, 1, (1000).to_bytes(4)) + _frame(4, 0, 0, b"")
        + _frame(0, 0, 1, _B[600:]) + _frame(0, 0x1, 1, b"")
    ],
    "trailers": [_frame(0, 0, 1, _B)],  # then trailers through the client's h2
    "half-a-frame-then-idle": [_frame(0, 0x1, 1, _B)[:500], _frame(0, 0x1, 1, _B)[500:]],
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_frames_amid_a_relayed_upload_end_as_with_the_layers(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool, case: str
) -> None:
    """After a relayed DATA frame, a hostile client's next frames: what the client sees,
    what nginx kept and the audit are the same relay off and on (the table, pinned from
    the layers' outcome)."""
    p, mark, audit_mark = h2_proxy, nginx_upstream.mark(), h2_proxy.view.audit_log.mark()
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(10)
        client = H2Stream(conn.sock)
        sid = client.open(h2_request(AUTHORITY, "POST", "/upload", ("content-length", "1000")))
        time.sleep(0.3)  # the upstream takes the headers: the next frame is relayed
        conn.sock.sendall(_frame(0, 0, sid, _A))
        time.sleep(0.1)
        for read in CASES[case]:
            conn.sock.sendall(read)
            time.sleep(1.5 if case == "half-a-frame-then-idle" else 0.1)
        if case == "trailers":
            client.conn.send_data(sid, b"", end_stream=False)
            client.conn.send_headers(sid, [("x-trailer", "t")], end_stream=True)
            client._flush()
        seen = _watch(conn.sock, client, ends=1)
        after: list[object] = []
        if case == "reset-mid-upload":  # the connection still carries another upload
            two = client.conn.get_next_available_stream_id()
            client.open(h2_request(AUTHORITY, "POST", "/upload", ("content-length", "5")))
            conn.sock.sendall(_frame(0, 0x1, two, b"again"))
            after = _watch(conn.sock, client, ends=1)
    kept = []
    for line in nginx_upstream.since(mark):
        if line["uri"] == "/upload":
            body = Path(line["body_file"]) if line["body_file"] else None
            data = body.read_bytes() if body is not None and body.exists() else None
            if body is not None:
                body.unlink(missing_ok=True)
            kept.append((line["status"], hashlib.sha256(data).hexdigest()[:12] if data else data))
    time.sleep(0.5)
    audits = [(a["status"], a["bytes_sent"]) for a in _audits(p, audit_mark)]
    outcome = (seen, after, kept, audits)
    assert outcome == EXPECTED[case], outcome


_REFUSED = (
    ["PROTOCOL_ERROR", "PROTOCOL_ERROR", None],
    [],
    [(499, None)],
    [(None, 100)],
)  # h2's GOAWAY, then mitmproxy's
_WHOLE = (["1 200", "ended 1"], [], [(200, "e3bbfc78228b")], [(200, 1000)])
EXPECTED: dict[str, object] = {
    "more-than-declared": _REFUSED,
    "less-then-end": _REFUSED,
    "pad-over-payload": _REFUSED,
    "data-on-an-even-stream": _REFUSED,
    "data-on-stream-0": _REFUSED,
    "data-on-an-unopened-stream": _REFUSED,
    "data-after-end": _WHOLE,
    # The reset upload: nginx 499, the audit counts what the proxy took (100 + 400); the
    # connection then carries another upload whole.
    "reset-mid-upload": ([], ["3 200", "ended 3"], [(499, None), (200, "b4c9e14061c2")],
                         [(None, 500), (200, 5)]),
    "control-frames-amid-data": _WHOLE,
    # Request trailers: nginx gives up on the request (499) and the client gets 502, relay
    # off as on (not the relay's; found and left, D662).
    "trailers": (["1 502", "ended 1"], [], [(499, None)], [(502, 1000)]),
    "half-a-frame-then-idle": _WHOLE,
}  # fmt: skip


BUDGET_CONFIG = CONFIG.replace(
    "    - domain: api.allowed.test\n",
    '    - domain: api.allowed.test\n      budget:\n        upload: "1MiB/day"\n',
)


def test_an_upload_cut_by_its_budget_mid_stream_reaches_the_upstream_as_with_the_layers(
    private_proxy: Callable[..., PrivateProxy],
    nginx_upstream: nginx.Nginx,
    files: Path,
    body_relay: bool,
) -> None:
    """An upload of unknown length crossing the entry's 1 MiB upload budget while it
    streams in relayable DATA frames: cut (the client's connection closed), nginx never
    gets a complete body, the audit counts the same, relay off and on."""
    p = relaying(private_proxy, body_relay)("relay-h2-budget", BUDGET_CONFIG)
    mark, audit_mark = nginx_upstream.mark(), p.view.audit_log.mark()
    sent, before = 0, _relayed(p) or 0
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(10)
        client = H2Stream(conn.sock)
        sid = client.open(h2_request(AUTHORITY, "POST", "/upload"))
        time.sleep(0.3)
        try:
            for _ in range(256):  # 4 MiB in 16 KiB frames, one read each
                conn.sock.sendall(_frame(0, 0, sid, b"u" * 16384))
                sent += 16384
                time.sleep(0.002)
        except OSError:
            pass
        seen = _watch(conn.sock, client, ends=1)
    time.sleep(1)
    lines = [
        (x["status"], x["body_file"]) for x in nginx_upstream.since(mark) if x["uri"] == "/upload"
    ]
    audits = [(a["status"], a["bytes_sent"], a.get("reason")) for a in _audits(p, audit_mark)]
    # Cut at the budget's byte: the client's connection closed, nginx gave up on the
    # request (499, nothing kept), the audit counts the 1 MiB the meter let through.
    assert (seen, lines, audits) == ([None], [(499, "")], [(None, MIB, "budget_exceeded")])
    assert sent > MIB
    carried = (_relayed(p) or 0) - before
    # With the relay on, what it carried went through the meter: never past the budget.
    assert (0 < carried <= MIB) if body_relay else (carried == 0), carried


def test_two_uploads_interleaved_in_one_read_arrive_whole(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """Two uploads open at once on one connection, their DATA frames interleaved in the
    same reads (relayable reads of one stream between them): nginx keeps each body
    exactly, relay off and on."""
    p, mark = h2_proxy, nginx_upstream.mark()
    one, two = b"1" * 50_000, b"2" * 70_000
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(10)
        client = H2Stream(conn.sock)
        a = client.open(h2_request(AUTHORITY, "POST", "/upload", ("content-length", "50000")))
        b = client.open(h2_request(AUTHORITY, "POST", "/upload", ("content-length", "70000")))
        time.sleep(0.3)
        for at in range(0, 70_000, 10_000):
            mixed = _frame(0, 0, b, two[at : at + 10_000])
            if at < 50_000:
                mixed = _frame(0, 0, a, one[at : at + 5_000]) + mixed
                mixed += _frame(0, 0, a, one[at + 5_000 : at + 10_000])
            conn.sock.sendall(mixed)
            conn.sock.sendall(_frame(0, 0, b, b""))  # an empty frame, a read of its own
            time.sleep(0.01)
        client.conn.end_stream(a)
        client.conn.end_stream(b)
        client._flush()
        seen = _watch(conn.sock, client, ends=2)
    assert sorted(x for x in seen if x is not None) == sorted(
        [f"{a} 200", f"ended {a}", f"{b} 200", f"ended {b}"]
    ), seen
    lines = nginx_upstream.lines_for(mark, "/upload", 2)
    kept = sorted(Path(x["body_file"]).read_bytes() for x in lines)
    for x in lines:
        Path(x["body_file"]).unlink()
    assert ([x["status"] for x in lines], kept) == ([200, 200], [one, two])


class _Held:
    """The tunnel's TLS socket with the h2 client's writes held while `holding` (`take`
    gives them to the test, which sends them cut where the attack says)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.held, self.holding = sock, bytearray(), True

    def sendall(self, data: bytes) -> None:
        if self.holding:
            self.held += data
        else:
            self.sock.sendall(data)

    def take(self) -> bytes:
        out = bytes(self.held)
        self.held.clear()
        return out

    def recv(self, size: int) -> bytes:
        return self.sock.recv(size)

    def fileno(self) -> int:
        return self.sock.fileno()


def test_an_upload_whose_first_read_ends_mid_frame_is_still_relayed(
    h2_proxy: PrivateProxy, nginx_upstream: nginx.Nginx, body_relay: bool
) -> None:
    """The client's first read (the preface, its SETTINGS, the request's HEADERS) ends part
    way into the first DATA frame, before the relay's route exists: h2 keeps that part.
    Every later read of 1,000 bytes ends mid-frame too (frames of 1,009): nginx keeps the
    body exactly, relay off and on, and with it on most of it was relayed (D740; before,
    h2's buffer never emptied again and 0 bytes were: found by CI, a 16 MiB upload
    through the `h2`-only client under load)."""
    p, mark, before = h2_proxy, nginx_upstream.mark(), _relayed(h2_proxy) or 0
    body = bytes(range(256)) * 160  # 40,960 bytes: within the client's first window
    with h2_tunnel(p, AUTHORITY) as conn:
        conn.sock.settimeout(10)
        held = _Held(conn.sock)
        client = H2Stream(held)  # type: ignore[arg-type]  # a socket for what H2Stream uses
        length = ("content-length", str(len(body)))
        sid = client.open(h2_request(AUTHORITY, "POST", "/upload", length))
        wire = b"".join(_frame(0, 0, sid, body[at : at + 1000]) for at in range(0, len(body), 1000))
        held.holding = False
        conn.sock.sendall(held.take() + wire[:500])
        time.sleep(0.5)  # the upstream connects and takes the headers: the body streams
        for at in range(500, len(wire), 1000):
            conn.sock.sendall(wire[at : at + 1000])
            time.sleep(0.005)
        conn.sock.sendall(_frame(0, 0x1, sid, b""))
        seen = _watch(conn.sock, client, ends=1, within=10)
    assert seen == [f"{sid} 200", f"ended {sid}"], seen
    (line,) = nginx_upstream.lines_for(mark, "/upload", 1)
    kept = Path(line["body_file"]).read_bytes()
    Path(line["body_file"]).unlink()
    assert (line["status"], hashlib.sha256(kept).hexdigest()) == (
        200, hashlib.sha256(body).hexdigest()
    )  # fmt: skip
    carried = (_relayed(p) or 0) - before
    assert (carried >= len(body) // 2) if body_relay else (carried == 0), carried
