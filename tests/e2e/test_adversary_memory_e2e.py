"""End to end, the proxy's memory stays bounded on the sandbox's paths (issue 10, items 2-3).

Each test sends `SIZE` (256 MiB) or more through a fresh proxy of its own: request and
response bodies over HTTP/1 and HTTP/2, allowed and refused, request heads and HTTP/2
header blocks that never end, and an HTTP/2 client that reads slowly or not at all.
The proxy's VmRSS is sampled from /proc while the bytes flow; the growth over the idle
baseline must stay under `GROWTH_BOUND_MIB` (tests/e2e/memory_support.py). Every peak is
printed and written to the results file (`EGRESS_E2E_RESULTS`).
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest

from testbed.bulk_server import pattern_chunks
from testbed.h2stream import H2Stream
from testbed.streaming import download, expected_sha256, send_pattern
from tests.e2e.conftest import BULK_PORT, BULK_TLS_PORT, HOSTILE_PORT, Bulk, Hostile, PrivateProxy
from tests.e2e.memory_support import (  # noqa: F401 - fixtures
    MIB,
    SIZE,
    h2_request,
    h2_tunnel,
    measure,
    plain,
    proxy_fixture,
    read_answer,
    send_until_answered,
)

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]


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


def test_http1_endless_chunk_size_line_from_the_client_closes_the_connection(
    proxy: PrivateProxy, bulk: Bulk
):
    """Fails on main before this branch: the unfinished chunk line is buffered whole."""
    host = f"other.allowed.test:{BULK_PORT}"
    head = (
        f"POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with measure(proxy, "http1_client_endless_chunk_line") as m, plain(proxy) as sock:
        sent = send_until_answered(sock, head.encode(), b"f", SIZE)
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass  # the connection ends (an upload in flight has no answer to get)
    m.assert_bounded()
    assert sent < SIZE // 4
    samples = proxy.process.scrape()
    assert samples[("egress_limit_refusals_total", (("limit", "request_head"),))] == 1


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


def test_http2_allowed_upload_streams_within_the_bound(proxy: PrivateProxy, bulk: Bulk):
    authority = f"api.allowed.test:{BULK_TLS_PORT}"
    with measure(proxy, "http2_upload_allowed") as m, h2_tunnel(proxy, authority) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(h2_request(authority, "POST", "/upload", ("content-length", str(SIZE))))
        sent = h2.send_body(sid, pattern_chunks(SIZE))
        outcome = h2.read_response(sid)
    assert (sent, outcome.status, outcome.reset_code) == (SIZE, "200", None)
    m.assert_bounded()


def test_http2_refused_stream_with_an_open_body_is_answered_and_reset_at_once(
    proxy: PrivateProxy, bulk: Bulk
):
    """Fails on main before this branch: the refused body is buffered (RSS +256 MiB), and
    the 403 only comes after END_STREAM. Since D350 the 403 comes first, then
    RST_STREAM(NO_ERROR) (before: INTERNAL_ERROR and no answer, D25)."""
    tunnel = f"api.allowed.test:{BULK_TLS_PORT}"
    mark = bulk.log.mark()
    with measure(proxy, "http2_upload_refused") as m, h2_tunnel(proxy, tunnel) as conn:
        h2 = H2Stream(conn.sock)
        # Another host than the tunnel's (host_mismatch), no content-length, no END_STREAM.
        refused = h2.open(h2_request(f"other.allowed.test:{BULK_TLS_PORT}", "POST", "/upload"))
        sent = h2.send_body(refused, pattern_chunks(SIZE))
        outcome = h2.read_response(refused)
        # The connection itself stays usable: only the stream was reset.
        ok = h2.open(h2_request(tunnel, "GET", "/ok"), end_stream=True)
        after = h2.read_response(ok)
    m.assert_bounded()
    assert (outcome.status, outcome.headers.get("x-egress-denied")) == ("403", "host_mismatch")
    assert outcome.ended and outcome.reset_code in (None, 0), outcome  # 0: NO_ERROR
    assert sent < SIZE // 4, m.figures
    assert after.status == "200"
    assert [e for e in bulk.log.since(mark) if e["event"] == "upload"] == []
    audit = proxy.view.audit_log.wait_for(0, lambda r: r["reason"] == "host_mismatch")
    assert (audit["decision"], audit["status"]) == ("deny", 403)


def test_http2_refused_request_that_ended_gets_the_readable_403(proxy: PrivateProxy):
    tunnel = f"api.allowed.test:{BULK_TLS_PORT}"
    with h2_tunnel(proxy, tunnel) as conn:
        h2 = H2Stream(conn.sock)
        sid = h2.open(h2_request(f"other.allowed.test:{BULK_TLS_PORT}", "GET", "/ok"), True)
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
    head = h2_request(authority, "GET", "/ok")
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
        sid = h2.open(h2_request(authority, "GET", f"/download?size={SIZE}"), True)
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
        sid = h2.open(h2_request(authority, "GET", f"/download?size={SIZE}"), True)
        while h2.outcomes[sid].body_bytes < MIB:
            h2._pump()  # read a little, then stop reading (and stop granting window)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            time.sleep(0.1)
        finished = [e for e in bulk.log.since(mark) if e["event"] == "download"]
    assert finished == [], "the upstream finished sending to a client that stopped reading"
    m.assert_bounded()
