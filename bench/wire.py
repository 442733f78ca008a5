"""A minimal HTTP/1.1 client on raw sockets, opened inside the client namespace.

Used by the probe (which checks each contender before it is measured) and by the
memory scenario (which must stream 1 GiB without keeping it). Bodies are read or
sent in chunks; nothing here keeps more than one chunk.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from testbed import nsock

CHUNK = 1 << 20
TIMEOUT = 30.0


@dataclass(frozen=True)
class Head:
    status: int
    headers: dict[str, str]  # lower-case names; the last value wins

    def length(self) -> int:
        return int(self.headers.get("content-length", "-1"))


def connect(ns: str, host: str, port: int) -> socket.socket:
    sock = nsock.connect(ns, (host, port), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_head(sock: socket.socket | ssl.SSLSocket, buffer: bytearray) -> Head:
    """Read up to the blank line; what came after it stays in `buffer`."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed before the response head")
        buffer += data
        if len(buffer) > 65536:
            raise ValueError("response head too large")
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Head(status, headers)


def tunnel(ns: str, proxy_port: int, authority: str) -> socket.socket:
    """A CONNECT tunnel through the proxy on the namespace's loopback."""
    sock = connect(ns, "127.0.0.1", proxy_port)
    sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    buffer = bytearray()
    head = read_head(sock, buffer)
    if head.status != 200 or buffer:
        sock.close()
        raise ConnectionError(f"CONNECT {authority} answered {head.status}")
    return sock


def wrap(sock: socket.socket, cafile: str, server_name: str) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=cafile)
    context.set_alpn_protocols(["http/1.1"])
    return context.wrap_socket(sock, server_hostname=server_name)


@dataclass(frozen=True)
class Response:
    head: Head
    received: int  # body bytes read (counted, not kept)
    prefix: bytes  # the first PREFIX bytes of the body, for checks


PREFIX = 4096


def request(
    sock: socket.socket | ssl.SSLSocket,
    method: str,
    target: str,
    host: str,
    headers: dict[str, str] | None = None,
    body_length: int = 0,
) -> Response:
    """Send a request (a body of `body_length` zero bytes, streamed) and drain the response."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body_length or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {body_length}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    zeros = memoryview(bytes(CHUNK))
    remaining = body_length
    while remaining:
        n = min(remaining, CHUNK)
        sock.sendall(zeros[:n])
        remaining -= n
    buffer = bytearray()
    head = read_head(sock, buffer)
    wanted = head.length()
    prefix = bytes(buffer[:PREFIX])
    received = len(buffer)
    chunk = bytearray(CHUNK)
    view = memoryview(chunk)
    while wanted < 0 or received < wanted:
        n = sock.recv_into(view, CHUNK if wanted < 0 else min(CHUNK, wanted - received))
        if not n:
            if wanted < 0:
                break
            raise ConnectionError(f"body cut at {received} of {wanted} bytes")
        if len(prefix) < PREFIX:
            prefix += bytes(view[: min(n, PREFIX - len(prefix))])
        received += n
    return Response(head, received, prefix)
