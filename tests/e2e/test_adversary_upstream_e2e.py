"""End to end, memory stays bounded on WebSocket and against a hostile upstream (issue 10).

WebSocket messages in both directions (many, and one that never ends), and an upstream
allowed by `*` (testbed/hostile_server.py) whose heads, chunk lines and trailers
never end, or whose status line is invalid: the proxy stays within `GROWTH_BOUND_MIB`
(tests/e2e/memory_support.py), answers the sandbox with a 502 (or cuts a streamed
response off), and never crashes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from collections.abc import Iterator

import pytest

from testbed.streaming import read_head
from tests.e2e.conftest import HOSTILE_PORT, Hostile, PrivateProxy
from tests.e2e.memory_support import (  # noqa: F401 - fixtures
    MIB,
    SIZE,
    measure,
    plain,
    proxy_fixture,
    read_answer,
    send_until_answered,
)

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]


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


def _assert_upstream_reset(headers: dict[str, str], body: bytes) -> None:
    """The product's failure (D352), not mitmproxy's page: the upstream broke the exchange."""
    assert headers.get("x-egress-denied") == "upstream_reset", (headers, body[:300])
    assert "server" not in headers and b"<html" not in body
    assert json.loads(body)["error"] == "egress_failed"


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
    _assert_upstream_reset(_headers, body)
    sent = hostile.ended(mark, path)
    assert sent["ended_by"] == "closed", sent
    assert sent["bytes"] < SIZE // 4, sent
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
    assert sent["ended_by"] == "closed", sent
    assert sent["bytes"] < SIZE // 4, sent


@pytest.mark.parametrize("variant", range(6))
def test_upstream_invalid_status_line_is_a_502(proxy: PrivateProxy, hostile: Hostile, variant: int):
    status, headers, body = _get_hostile(proxy, f"/bad-status?variant={variant}")
    assert status == 502, body[:300]
    _assert_upstream_reset(headers, body)
    assert "mitmproxy has crashed" not in proxy.process.child.stderr.read_text()


def test_upstream_trailers_do_not_crash_the_proxy(proxy: PrivateProxy, hostile: Hostile):
    status, _headers, _body = _get_hostile(proxy, "/small-trailers")
    assert status == 200
    assert "mitmproxy has crashed" not in proxy.process.child.stderr.read_text()
    assert proxy.process.healthz() == 200
