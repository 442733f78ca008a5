"""A deliberately small HTTP/1.1 client that writes requests byte for byte.

The end-to-end tests need requests a normal client refuses to build: absolute-form
targets whose Host disagrees, duplicate and case-variant headers, CONNECT to odd
authorities, two requests with different Hosts on one kept-alive tunnel. So requests
are raw bytes and responses are parsed here. Every socket operation has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any

TIMEOUT = 10.0
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.header_all(name)
        return values[0] if values else None

    def header_all(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)

    def describe(self) -> str:
        head = "\n".join(f"{n}: {v}" for n, v in self.headers)
        return f"{self.status} {self.reason}\n{head}\n\n{self.body[:600]!r}"


def chunked(data: bytes, size: int = 65536) -> bytes:
    """`data` in the chunked transfer coding (send with `Transfer-Encoding: chunked`)."""
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def request_bytes(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes = b""
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"] + [f"{n}: {v}" for n, v in headers]
    framed = any(n.lower() in ("content-length", "transfer-encoding") for n, _ in headers)
    if body and not framed:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Conn:
    """One client connection to the proxy; can be upgraded to TLS after a CONNECT."""

    def __init__(self, host: str, port: int, timeout: float = TIMEOUT) -> None:
        self.sock: socket.socket = socket.create_connection((host, port), timeout=timeout)
        self._buf = b""

    @classmethod
    def over(cls, sock: socket.socket) -> Conn:
        """A connection on a socket opened elsewhere (e.g. inside another namespace)."""
        conn = cls.__new__(cls)
        conn.sock, conn._buf = sock, b""
        return conn

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def start_tls(
        self,
        context: ssl.SSLContext,
        server_hostname: str | None,
    ) -> None:
        if self._buf:
            raise AssertionError(f"bytes after the CONNECT response: {self._buf[:100]!r}")
        self.sock = context.wrap_socket(self.sock, server_hostname=server_hostname)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self._buf += data
        return True

    def _read_until(self, marker: bytes, limit: int = 65536) -> bytes:
        while marker not in self._buf:
            if len(self._buf) > limit:
                raise ValueError("response head too large")
            if not self._fill():
                raise ConnectionError(f"connection closed; got {self._buf[:200]!r}")
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not self._fill():
                raise ConnectionError("connection closed inside a body")
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _read_to_close(self) -> bytes:
        while len(self._buf) <= MAX_BODY and self._fill():
            pass
        data, self._buf = self._buf, b""
        return data

    def read_response(self, method: str = "GET") -> Response:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        status_line, *header_lines = head.split("\r\n")
        _version, status, *reason = status_line.split(" ", 2)
        headers = []
        for line in header_lines:
            name, _, value = line.partition(":")
            headers.append((name, value.strip()))
        code = int(status)
        lower = {n.lower(): v for n, v in headers}
        bodiless = method == "HEAD" or code in (204, 304) or 100 <= code < 200
        tunnel_opened = method == "CONNECT" and 200 <= code < 300
        if bodiless or tunnel_opened:
            body = b""
        elif "chunked" in lower.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        elif "content-length" in lower:
            body = self._read_exactly(int(lower["content-length"]))
        else:
            body = self._read_to_close()
        return Response(code, reason[0] if reason else "", headers, body)

    def _read_chunked(self) -> bytes:
        body = b""
        while True:
            size = int(self._read_until(b"\r\n").split(b";")[0].strip(), 16)
            if size == 0:
                while self._read_until(b"\r\n"):
                    pass
                return body
            body += self._read_exactly(size)
            self._read_exactly(2)
            if len(body) > MAX_BODY:
                raise ValueError("body too large")

    def request(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes = b"",
    ) -> Response:
        self.send(request_bytes(method, target, headers, body))
        return self.read_response(method)

    def connect(self, authority: str, headers: list[tuple[str, str]] | None = None) -> Response:
        return self.request("CONNECT", authority, [("Host", authority), *(headers or [])])
