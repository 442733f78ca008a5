"""Client side of the streaming tests: bodies sent and received in chunks, never held whole.

Each transfer counts its bytes and hashes them as they pass, so a 1 GiB body costs the
test process one buffer, not a gigabyte. Heads are parsed here (rawhttp's reader keeps
bodies in memory, which is right for small ones only).
"""

from __future__ import annotations

import functools
import hashlib
import socket
from dataclasses import dataclass

from testbed.bulk_server import pattern_chunks

BUFFER = 1 << 20
MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class Received:
    status: int
    headers: dict[str, str]
    count: int
    sha256: str


@functools.cache
def expected_sha256(size: int) -> str:
    digest = hashlib.sha256()
    for chunk in pattern_chunks(size):
        digest.update(chunk)
    return digest.hexdigest()


def read_head(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, body bytes read past the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the response head; got {data[:200]!r}")
        data += chunk
        if len(data) > MAX_HEAD:
            raise ValueError("response head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ", 2)[1]), headers, rest


def receive_body(sock: socket.socket, already: bytes, length: int) -> Received:
    """Read exactly `length` body bytes (some may be in `already`), hashing them."""
    digest, count = hashlib.sha256(), 0
    digest.update(already)
    count += len(already)
    buffer = bytearray(BUFFER)
    view = memoryview(buffer)
    while count < length:
        n = sock.recv_into(view, min(BUFFER, length - count))
        if n == 0:
            break
        digest.update(view[:n])
        count += n
    return Received(200, {}, count, digest.hexdigest())


def receive_chunked(sock: socket.socket, already: bytes, keep: bytearray | None = None) -> Received:
    """Read a chunked body to its last chunk (no trailers), hashing the data as it comes
    (and adding it to `keep` if given); at most one chunk's bytes are held otherwise. A
    framing error raises ValueError."""
    digest, count, buf = hashlib.sha256(), 0, bytearray(already)

    def fill(need: int) -> None:
        while len(buf) < need:
            data = sock.recv(BUFFER)
            if not data:
                raise ConnectionError(f"closed inside a chunked body after {count} bytes")
            buf.extend(data)

    while True:
        while b"\r\n" not in buf:
            fill(len(buf) + 1)
        line, _, rest = bytes(buf).partition(b"\r\n")
        size = int(line, 16)
        del buf[: len(line) + 2]
        if size == 0:
            fill(2)
            if bytes(buf[:2]) != b"\r\n":
                raise ValueError(f"trailers or junk after the last chunk: {bytes(buf[:40])!r}")
            return Received(200, {}, count, digest.hexdigest())
        fill(size + 2)
        if bytes(buf[size : size + 2]) != b"\r\n":
            raise ValueError(f"a chunk of {size} not ended by CRLF")
        digest.update(buf[:size])
        if keep is not None:
            keep += buf[:size]
        count += size
        del buf[: size + 2]


def download(sock: socket.socket, request: bytes) -> Received:
    """Send `request`, then stream the response body (of a length, or chunked) into a
    digest."""
    sock.sendall(request)
    status, headers, rest = read_head(sock)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = receive_chunked(sock, rest)
    else:
        body = receive_body(sock, rest, int(headers.get("content-length", "0")))
    return Received(status, headers, body.count, body.sha256)


def send_pattern(sock: socket.socket, size: int) -> str:
    """Send `size` pattern bytes; returns their sha256 (computed while sending)."""
    digest = hashlib.sha256()
    for chunk in pattern_chunks(size):
        sock.sendall(chunk)
        digest.update(chunk)
    return digest.hexdigest()


def send_until_closed(sock: socket.socket, size: int) -> tuple[int, BaseException | None]:
    """Send up to `size` pattern bytes; returns how many the kernel took before an error."""
    sent = 0
    try:
        for chunk in pattern_chunks(size):
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError as exc:  # reset, broken pipe, or a timeout once the window stays shut
        return sent, exc
    return sent, None


def blank_echoes(
    got: bytearray, sent: bytearray, value: bytes, every: int
) -> tuple[int, list[int]]:
    """Where `echo_body` wrote `value` into `sent` (every `every` bytes): how many places,
    and those at which `got` still holds `value` (unmasked). Both are blanked there, so
    that `got == sent` afterwards says nothing else changed and nothing moved."""
    places = range(0, len(sent) - len(value) + 1, every)
    unmasked = [at for at in places if got[at : at + len(value)] == value]
    for at in places:
        got[at : at + len(value)] = sent[at : at + len(value)] = bytes(len(value))
    return len(places), unmasked
