"""End to end, the proxy's memory stays bounded on every protocol path (issue 10, items 2-3).

Each test sends `SIZE` (256 MiB) or more through a fresh proxy of its own — request and
response bodies over HTTP/1 and HTTP/2, allowed and refused, WebSocket messages, request
heads that never end, and a hostile upstream (tests/support/hostile_server.py) whose
heads, chunk lines and trailers never end. The proxy's VmRSS is sampled from /proc while
the bytes flow; the growth over the idle baseline must stay under `GROWTH_BOUND_MIB`.
Every peak is printed and written to the results file (`EGRESS_E2E_RESULTS`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    BULK_PORT,
    BULK_TLS_PORT,
    REPO,
    SECRET_ENV,
    Bulk,
    PrivateProxy,
    _start_and_wait,
)
from tests.support.bulk_server import pattern_chunks
from tests.support.h2stream import H2Stream
from tests.support.harness import JsonLines
from tests.support.netns import UPSTREAM_IP, Topology
from tests.support.proxyproc import ProxyProcess, RssSampler, record_result
from tests.support.streaming import download, expected_sha256, read_head, send_pattern

pytestmark = pytest.mark.netns

MIB = 1 << 20
SIZE = int(os.environ.get("EGRESS_E2E_MEMORY_BYTES", str(256 * MIB)))
# The proxy idles at ~77 MiB. A streamed transfer holds a few 64 KiB read buffers, the TLS
# and HTTP/2 windows and the largest message the bounds allow (16 MiB of WebSocket);
# 64 MiB is a quarter of what goes through, so buffering any body, head or message whole
# would exceed it.
GROWTH_BOUND_MIB = 64
HOSTILE_PORT = 8090
HOSTILE_SERVER = REPO / "tests" / "support" / "hostile_server.py"
TIMEOUT = 30.0

CONFIG = f"""\
network:
  allowlist:
    - domain: "*"
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""


@dataclass(frozen=True)
class Hostile:
    log: JsonLines

    def ended(self, mark: int, path: str) -> dict:
        return self.log.wait_for(mark, lambda e: e.get("path") == path, timeout=15)


@pytest.fixture(scope="session")
def hostile(topology: Topology, e2e_dir: Path) -> Iterator[Hostile]:
    log, ready = e2e_dir / "hostile.jsonl", e2e_dir / "hostile.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, str(HOSTILE_SERVER), "--log", str(log), "--ready", str(ready),
        "--listen", f"{UPSTREAM_IP}:{HOSTILE_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("hostile-upstream", argv, e2e_dir, ready)
    try:
        yield Hostile(JsonLines(log))
    finally:
        child.stop()


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy], bulk: Bulk) -> PrivateProxy:
    p = private_proxy("memory", CONFIG)
    with p.view.tunnel(f"api.allowed.test:{BULK_TLS_PORT}") as conn:  # warm up TLS
        assert conn.request("GET", "/ok", [("Host", "api.allowed.test")]).status == 200
    return p


class Measured:
    """The proxy's memory while a block runs: baseline, sampled peak, growth (MiB)."""

    def __init__(self, process: ProxyProcess, key: str) -> None:
        self.process, self.key = process, key
        self.figures: dict[str, float] = {}

    @contextlib.contextmanager
    def run(self) -> Iterator[Measured]:
        baseline = self.process.status_kib("VmRSS")
        started = time.monotonic()
        with RssSampler(self.process) as rss:
            yield self
        self.figures.update(
            rss_before_mib=round(baseline / 1024, 1),
            rss_peak_mib=round(rss.peak_kib / 1024, 1),
            growth_mib=round((rss.peak_kib - baseline) / 1024, 1),
            seconds=round(time.monotonic() - started, 2),
        )
        record_result(f"memory_{self.key}", self.figures)

    def assert_bounded(self) -> None:
        assert self.figures["growth_mib"] < GROWTH_BOUND_MIB, self.figures


def measure(p: PrivateProxy, key: str) -> contextlib.AbstractContextManager[Measured]:
    return Measured(p.process, key).run()


def plain(p: PrivateProxy) -> socket.socket:
    return socket.create_connection((p.view.proxy_host, p.view.proxy_port), timeout=TIMEOUT)


def h2_tunnel(p: PrivateProxy, authority: str) -> contextlib.AbstractContextManager:
    return p.view.tunnel(authority, alpn=["h2"])


def send_until_answered(sock: socket.socket, prefix: bytes, unit: bytes, size: int) -> int:
    """Send `prefix`, then `unit` repeated up to `size` bytes, until the proxy answers or
    closes; returns the bytes sent. Reading is left to the caller."""
    import select

    sock.sendall(prefix)
    sent, step = len(prefix), unit * max(1, MIB // len(unit))
    try:
        while sent < size and not select.select([sock], [], [], 0)[0]:
            sock.sendall(step)
            sent += len(step)
    except OSError:
        pass
    return sent


def read_answer(sock: socket.socket) -> tuple[int | None, dict[str, str], bytes]:
    try:
        status, headers, rest = read_head(sock)
    except (OSError, ConnectionError):
        return None, {}, b""
    with contextlib.suppress(OSError):
        while len(rest) < int(headers.get("content-length", "0")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest


# -- request bodies over HTTP/1 ---------------------------------------------------------------


def test_http1_allowed_upload_streams_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    host = f"other.allowed.test:{BULK_PORT}"
    head = f"POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {SIZE}\r\n\r\n"
    with measure(proxy, "http1_upload_allowed") as m, plain(proxy) as sock:
        sock.sendall(head.encode())
        digest = send_pattern(sock, SIZE)
        status, _headers, body = read_answer(sock)
    assert status == 200
    assert json.loads(body) == {"event": "upload", "bytes": SIZE, "sha256": digest}
    m.assert_bounded()


def test_http1_refused_upload_is_closed_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    mark = bulk.log.mark()
    host = f"api.allowed.test:{BULK_PORT}"  # a transform host over plain HTTP: refused
    head = (
        f"POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with measure(proxy, "http1_upload_refused") as m, plain(proxy) as sock:
        sent = send_until_answered(sock, head.encode() + b"%x\r\n" % SIZE, b"u", SIZE)
    assert sent < SIZE // 4, m.figures
    assert bulk.log.since(mark) == []
    m.assert_bounded()


def test_http1_download_streams_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    host = f"other.allowed.test:{BULK_PORT}"
    request = f"GET http://{host}/download?size={SIZE} HTTP/1.1\r\nHost: {host}\r\n\r\n"
    with measure(proxy, "http1_download") as m, plain(proxy) as sock:
        got = download(sock, request.encode())
    assert (got.status, got.count, got.sha256) == (200, SIZE, expected_sha256(SIZE))
    m.assert_bounded()


# -- request heads from the client ------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "prefix", "unit"),
    [
        ("one_endless_line", b"X-Endless: ", b"a"),
        ("endless_header_lines", b"", b"X-Many: %s\r\n" % (b"m" * 52)),
    ],
)
def test_http1_request_head_over_the_bound_is_refused_431(
    proxy: PrivateProxy, hostile: Hostile, shape: str, prefix: bytes, unit: bytes
):
    """Fails on main before this branch: the head is buffered whole (RSS +256 MiB)."""
    host = f"other.allowed.test:{HOSTILE_PORT}"
    start = f"GET http://{host}/endless-chunks HTTP/1.1\r\nHost: {host}\r\n".encode()
    mark = hostile.log.mark()
    with measure(proxy, f"http1_request_head_{shape}") as m, plain(proxy) as sock:
        sent = send_until_answered(sock, start + prefix, unit, SIZE)
        status, headers, body = read_answer(sock)
    m.assert_bounded()
    assert (status, headers.get("x-egress-denied")) == (431, "bad_request"), (sent, body[:300])
    assert json.loads(body)["reason"] == "bad_request"
    assert sent < SIZE // 4
    assert hostile.log.since(mark) == []  # nothing reached the upstream
    samples = proxy.process.scrape()
    assert samples[("egress_limit_refusals_total", (("limit", "request_head"),))] == 1


# -- request bodies over HTTP/2 ---------------------------------------------------------------


def _h2_request(authority: str, method: str, path: str, *extra: tuple[str, str]) -> list:
    return [(":method", method), (":scheme", "https"), (":authority", authority),
            (":path", path), *extra]  # fmt: skip


def test_http2_allowed_upload_streams_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    authority = f"api.allowed.test:{BULK_TLS_PORT}"
    with measure(proxy, "http2_upload_allowed") as m, h2_tunnel(proxy, authority) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(_h2_request(authority, "POST", "/upload", ("content-length", str(SIZE))))
        sent = h2.send_body(sid, pattern_chunks(SIZE))
        outcome = h2.read_response(sid)
    assert (sent, outcome.status, outcome.reset_code) == (SIZE, "200", None)
    m.assert_bounded()


def test_http2_refused_stream_with_an_open_body_is_reset_at_once(proxy: PrivateProxy, bulk: Bulk):
    """Fails on main before this branch: the refused body is buffered (RSS +256 MiB), and
    the 403 only comes after END_STREAM."""
    tunnel = f"api.allowed.test:{BULK_TLS_PORT}"
    mark = bulk.log.mark()
    with measure(proxy, "http2_upload_refused") as m, h2_tunnel(proxy, tunnel) as conn:
        h2 = H2Stream(conn.sock)
        # Another host than the tunnel's (host_mismatch), no content-length, no END_STREAM.
        refused = h2.open(_h2_request(f"other.allowed.test:{BULK_TLS_PORT}", "POST", "/upload"))
        sent = h2.send_body(refused, pattern_chunks(SIZE))
        outcome = h2.read_response(refused)
        # The connection itself stays usable: only the stream was reset.
        ok = h2.open(_h2_request(tunnel, "GET", "/ok"), end_stream=True)
        after = h2.read_response(ok)
    m.assert_bounded()
    assert outcome.reset_code is not None and outcome.status is None, outcome
    assert sent < SIZE // 4, m.figures
    assert after.status == "200"
    assert [e for e in bulk.log.since(mark) if e["event"] == "upload"] == []
    audit = proxy.view.audit_log.wait_for(0, lambda r: r["reason"] == "host_mismatch")
    assert (audit["decision"], audit["status"]) == ("deny", None)


def test_http2_refused_request_that_ended_gets_the_readable_403(proxy: PrivateProxy):
    tunnel = f"api.allowed.test:{BULK_TLS_PORT}"
    with h2_tunnel(proxy, tunnel) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(_h2_request(f"other.allowed.test:{BULK_TLS_PORT}", "GET", "/ok"), True)
        outcome = h2.read_response(sid)
    assert (outcome.status, outcome.headers.get("x-egress-denied")) == ("403", "host_mismatch")


def _frame_types(data: bytes) -> list[str]:
    from hyperframe.frame import Frame

    types = []
    while len(data) >= 9:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        types.append(type(frame).__name__)
        data = data[9 + length :]
    return types


@pytest.mark.parametrize("shape", ["continuation_flood", "oversized_header_list"])
def test_http2_header_block_over_the_bound_closes_the_connection(proxy: PrivateProxy, shape: str):
    """A guard (the h2 library bounds these, D28): HEADERS followed by CONTINUATION frames
    that never end the block, or one header list of 256 KiB once decoded."""
    import hpack
    from hyperframe.frame import ContinuationFrame, HeadersFrame

    authority = f"api.allowed.test:{BULK_TLS_PORT}"
    head = _h2_request(authority, "GET", "/ok")
    sent, closed, received = 0, False, b""
    with measure(proxy, f"http2_{shape}") as m, h2_tunnel(proxy, authority) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.conn.get_next_available_stream_id()
        if shape == "oversized_header_list":
            block = hpack.Encoder().encode([*head, ("x-huge", "h" * (256 << 10))])
            pieces = [block[i : i + (1 << 14)] for i in range(0, len(block), 1 << 14)]
            frames = [HeadersFrame(sid, data=pieces[0], flags=["END_STREAM"])]
            frames += [ContinuationFrame(sid, data=piece) for piece in pieces[1:]]
            frames[-1].flags.add("END_HEADERS")
        else:  # a block that never ends
            frames = [HeadersFrame(sid, data=hpack.Encoder().encode(head))]
            frames += [ContinuationFrame(sid, data=b"\x00" * (1 << 14)) for _ in range(SIZE >> 14)]
        with contextlib.suppress(OSError):
            for frame in frames:
                conn.sock.sendall(frame.serialize())
                sent += len(frame.data)
        received = b""
        with contextlib.suppress(OSError):
            while chunk := conn.sock.recv(65536):
                received += chunk
            closed = True
    m.assert_bounded()
    assert closed
    assert "GoAwayFrame" in _frame_types(received)  # a connection error, not a hang
    assert sent < SIZE // 4 or shape == "oversized_header_list"
    assert proxy.process.healthz() == 200
    assert "mitmproxy has crashed" not in proxy.process.child.stderr.read_text()


def test_http2_download_streams_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    authority = f"api.allowed.test:{BULK_TLS_PORT}"
    with measure(proxy, "http2_download") as m, h2_tunnel(proxy, authority) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(_h2_request(authority, "GET", f"/download?size={SIZE}"), True)
        outcome = h2.read_response(sid)
    assert (outcome.status, outcome.body_bytes) == ("200", SIZE)
    assert outcome.sha256 == expected_sha256(SIZE)
    m.assert_bounded()


def test_http2_client_that_stops_reading_holds_the_upstream_back(proxy: PrivateProxy, bulk: Bulk):
    """Fails on main before this branch: mitmproxy queues what the client's window does
    not admit and keeps reading the upstream, so the whole body ends up in memory."""
    authority, mark = f"api.allowed.test:{BULK_TLS_PORT}", bulk.log.mark()
    with measure(proxy, "http2_stalled_reader") as m, h2_tunnel(proxy, authority) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(_h2_request(authority, "GET", f"/download?size={SIZE}"), True)
        while h2.outcomes[sid].body_bytes < MIB:
            h2._pump()  # read a little, then stop reading (and stop granting window)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
        finished = [e for e in bulk.log.since(mark) if e["event"] == "download"]
    assert finished == [], "the upstream finished sending to a client that stopped reading"
    m.assert_bounded()


# -- WebSocket --------------------------------------------------------------------------------


def _ws_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame, masked with the all-zero key (legal, and the payload stays as is)."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        length = bytes([0x80 | n])
    elif n < 1 << 16:
        length = bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        length = bytes([0x80 | 127]) + struct.pack("!Q", n)
    return bytes([first]) + length + b"\0\0\0\0" + payload


@contextlib.contextmanager
def websocket(p: PrivateProxy, query: str = "") -> Iterator[socket.socket]:
    host = f"other.allowed.test:{HOSTILE_PORT}"
    with plain(p) as sock:
        sock.sendall(
            f"GET http://{host}/ws{query} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        status, _headers, rest = read_head(sock)
        assert (status, rest) == (101, b"")
        yield sock


def _read_close_code(sock: socket.socket) -> int | None:
    """The code of the close frame the proxy sent, or None if it only closed the socket."""
    data = b""
    with contextlib.suppress(OSError):
        while len(data) < 4:
            chunk = sock.recv(64)
            if not chunk:
                break
            data += chunk
    if len(data) >= 4 and data[0] == 0x88:
        return int.from_bytes(data[2:4], "big")
    return None


def test_websocket_messages_are_not_kept(proxy: PrivateProxy, hostile: Hostile):
    """Fails on main before this branch: every message stays on the flow (RSS +256 MiB)."""
    mark, count = hostile.log.mark(), SIZE // MIB
    message = _ws_frame(0x2, bytes(MIB))
    with measure(proxy, "websocket_messages") as m, websocket(proxy) as sock:
        for _ in range(count):
            sock.sendall(message)
        sock.sendall(_ws_frame(0x8, (1000).to_bytes(2, "big")))
        code = _read_close_code(sock)
    sink = hostile.log.wait_for(mark, lambda e: e["event"] == "ws", timeout=15)
    assert (sink["messages"], sink["bytes"], sink["close_code"]) == (count, count * MIB, 1000)
    assert code == 1000
    m.assert_bounded()


def test_websocket_message_over_the_bound_is_closed_with_1009(
    proxy: PrivateProxy, hostile: Hostile
):
    """Fails on main before this branch: the fragments of one message pile up unbounded."""
    mark = hostile.log.mark()
    first, more = _ws_frame(0x2, bytes(MIB), fin=False), _ws_frame(0x0, bytes(MIB), fin=False)
    sent = 0
    with measure(proxy, "websocket_huge_message") as m, websocket(proxy) as sock:
        sock.sendall(first)
        sent = send_until_answered(sock, b"", more, SIZE) + len(first)
        code = _read_close_code(sock)
    m.assert_bounded()
    assert code == 1009
    assert sent < SIZE // 4
    sink = hostile.log.wait_for(mark, lambda e: e["event"] == "ws", timeout=15)
    assert sink["messages"] == 0
    samples = proxy.process.scrape()
    assert samples[("egress_limit_refusals_total", (("limit", "websocket_message"),))] == 1


def _read_server_frames(sock: socket.socket, count: int) -> tuple[int, int | None]:
    """Read frames from the proxy until `count` messages ended or a close frame came:
    (messages, close code or None if the socket closed). Payloads are skipped, not kept."""
    stream = sock.makefile("rb")
    messages = 0

    def exactly(n: int) -> bytes:
        data = stream.read(n)
        if len(data) < n:
            raise ConnectionError("closed inside a frame")
        return data

    try:
        while messages < count:
            b0, b1 = exactly(2)
            length = b1 & 0x7F
            if length >= 126:
                wide = length == 127
                (length,) = struct.unpack("!Q" if wide else "!H", exactly(8 if wide else 2))
            if b0 & 0x0F == 0x8:
                return messages, int.from_bytes(exactly(length)[:2], "big")
            while length:
                length -= len(exactly(min(length, MIB)))
            messages += 1 if b0 & 0x80 else 0
    except (OSError, ConnectionError):
        return messages, None
    finally:
        stream.close()
    return messages, None


def test_websocket_messages_from_the_upstream_are_not_kept(proxy: PrivateProxy, hostile: Hostile):
    """Fails on main before this branch, like the client's direction."""
    count = SIZE // MIB
    with (
        measure(proxy, "websocket_upstream_messages") as m,
        websocket(proxy, f"?send={count}") as sock,
    ):
        messages, code = _read_server_frames(sock, count)
        sock.sendall(_ws_frame(0x8, (1000).to_bytes(2, "big")))
        closing = _read_close_code(sock)
    assert (messages, code, closing) == (count, None, 1000)
    m.assert_bounded()


def test_websocket_endless_message_from_the_upstream_is_closed_with_1009(
    proxy: PrivateProxy, hostile: Hostile
):
    """Fails on main before this branch: the upstream's fragments pile up in the proxy."""
    mark, count = hostile.log.mark(), SIZE // MIB
    query = f"?send={count}&endless=1"
    with measure(proxy, "websocket_upstream_endless_message") as m, websocket(proxy, query) as sock:
        messages, code = _read_server_frames(sock, 1)
    m.assert_bounded()
    assert (messages, code) == (0, 1009)
    sink = hostile.log.wait_for(mark, lambda e: e["event"] == "ws", timeout=15)
    assert sink["close_code"] in (1009, None)  # told, or cut off while it was still sending
    samples = proxy.process.scrape()
    assert samples[("egress_limit_refusals_total", (("limit", "websocket_message"),))] == 1


# -- a hostile upstream -----------------------------------------------------------------------


def _get_hostile(p: PrivateProxy, path: str) -> tuple[int | None, dict[str, str], bytes]:
    host = f"notlisted.test:{HOSTILE_PORT}"  # allowed by `*` alone
    with plain(p) as sock:
        sock.sendall(f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        return read_answer(sock)


@pytest.mark.parametrize("path", ["/huge-head", "/many-headers"])
def test_upstream_head_over_the_bound_is_a_502(proxy: PrivateProxy, hostile: Hostile, path: str):
    """Fails on main before this branch: the response head is buffered whole."""
    mark = hostile.log.mark()
    with measure(proxy, f"upstream{path.replace('-', '_').replace('/', '_')}") as m:
        status, _headers, body = _get_hostile(proxy, path)
    m.assert_bounded()
    assert status == 502, body[:300]
    sent = hostile.ended(mark, path)
    assert sent["ended_by"] == "closed" and sent["bytes"] < SIZE // 4, sent
    samples = proxy.process.scrape()
    assert samples[("egress_limit_refusals_total", (("limit", "response_head"),))] == 1


def test_upstream_endless_chunks_stream_within_the_bound(proxy: PrivateProxy, hostile: Hostile):
    host = f"notlisted.test:{HOSTILE_PORT}"
    received = 0
    with measure(proxy, "upstream_endless_chunks") as m, plain(proxy) as sock:
        sock.sendall(f"GET http://{host}/endless-chunks HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, headers, rest = read_head(sock)
        received = len(rest)
        while received < SIZE and (chunk := sock.recv(1 << 20)):
            received += len(chunk)
    assert (status, headers.get("transfer-encoding")) == (200, "chunked")
    assert received >= SIZE
    m.assert_bounded()


@pytest.mark.parametrize("path", ["/endless-chunk-line", "/huge-trailers"])
def test_upstream_endless_chunk_line_or_trailers_end_the_response(
    proxy: PrivateProxy, hostile: Hostile, path: str
):
    """Fails on main before this branch: the unfinished line is buffered whole."""
    host = f"notlisted.test:{HOSTILE_PORT}"
    mark = hostile.log.mark()
    key = f"upstream{path.replace('-', '_').replace('/', '_')}"
    with measure(proxy, key) as m, plain(proxy) as sock:
        sock.sendall(f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, _headers, rest = read_head(sock)
        body = rest
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                body += chunk
    m.assert_bounded()
    assert status == 200  # the head was already streamed to the sandbox
    assert not body.endswith(b"0\r\n\r\n")  # the sandbox sees a cut-off body, never a whole one
    sent = hostile.ended(mark, path)
    assert sent["ended_by"] == "closed" and sent["bytes"] < SIZE // 4, sent


@pytest.mark.parametrize("variant", range(6))
def test_upstream_invalid_status_line_is_a_502(proxy: PrivateProxy, hostile: Hostile, variant: int):
    status, _headers, body = _get_hostile(proxy, f"/bad-status?variant={variant}")
    assert status == 502, body[:300]
    assert "mitmproxy has crashed" not in proxy.process.child.stderr.read_text()


def test_upstream_trailers_do_not_crash_the_proxy(proxy: PrivateProxy, hostile: Hostile):
    status, _headers, _body = _get_hostile(proxy, "/small-trailers")
    assert status == 200
    assert "mitmproxy has crashed" not in proxy.process.child.stderr.read_text()
    assert proxy.process.healthz() == 200
