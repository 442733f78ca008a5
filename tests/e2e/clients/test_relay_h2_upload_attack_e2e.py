"""Attack round on the HTTP/2 upload relay (issue 49, D660-D665): a hostile client's raw
frames, the relay off and on, the same outcome.

Each test opens an `h2`-only tunnel through a proxy run with `--body-relay` off and on
(`body_relay`), writes frames by hand over the TLS socket (one `sendall` is one TLS
record, so one read at the proxy), and asserts what the client sees and what nginx kept.
"""

from __future__ import annotations

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
from tests.e2e.clients.test_relay_h2_e2e import AUTHORITY, CONFIG, _curl, _relayed, _uploaded, files
from tests.e2e.conftest import PrivateProxy, relaying
from tests.e2e.memory_support import h2_request, h2_tunnel

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
    for line in nginx_upstream.since(mark):
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
