"""A bulk HTTP(S)/1.1 upstream for the streaming and soak tests: large bodies, cheap requests.

Run inside a network namespace (`ip netns exec NS python -m testbed.bulk_server ...`);
the tests import `pattern_chunks` to produce or verify the same bytes.

* `GET /download?size=N`: N bytes of `pattern_chunks(N)`, with a Content-Length. When the
  last byte is handed to the kernel, `{"event": "download", "bytes", "sha256"}` is logged.
  With `&chunked=K`, the same bytes in chunked coding, chunks of K bytes (each written
  on its own, as a streaming server writes events).
* `POST /upload` (Content-Length or chunked): the body is hashed as it arrives, never
  kept; `{"event": "upload", "bytes", "sha256"}` is logged and returned as the JSON body.
* `GET /echo?size=N&every=K`: N bytes of `echo_body(N, value, K)`, the request's
  `Authorization` value written into the pattern every K bytes (the echo that redaction
  masks, across any read's boundary); logged as `{"event": "echo", "bytes", "sha256"}`.
  With `&chunked=K`, in chunked coding, chunks of K bytes.
* `GET /ok`: a 2-byte answer, counted in memory only (no log line: the soak sends
  ~10^5 of them); `GET /stats` returns the counts as JSON.

Connections are kept alive. Memory stays bounded whatever the body size: at most one
chunk per connection is held. When every listener is bound, `--ready` is created.
Uses the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO, cast
from urllib.parse import parse_qs, urlsplit

from testbed.serving import EventLog, arguments, parse_hostport, tls_context, until_stopped_blocking

CHUNK = 1 << 20
IO_TIMEOUT = 60.0
MAX_HEAD = 64 * 1024
_BASE = random.Random(20240917).randbytes(CHUNK)


def echo_body(size: int, value: bytes, every: int) -> bytes:
    """`size` pattern bytes with `value` written at 0, `every`, 2 * `every`... (where it
    fits): what `/echo` answers, for a test to rebuild and compare."""
    body = bytearray(b"".join(pattern_chunks(size)))
    for at in range(0, size - len(value) + 1, every) if value else ():
        body[at : at + len(value)] = value
    return bytes(body)


def pattern_chunks(size: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """`size` deterministic bytes: each 1 MiB block starts with its own index, so a
    dropped, repeated or reordered block changes the digest."""
    index, left = 0, size
    while left > 0:
        block = index.to_bytes(8, "big") + _BASE[8:]
        for start in range(0, min(CHUNK, left), chunk):
            yield block[start : start + min(chunk, left - start)]
        left -= min(CHUNK, left)
        index += 1


class Counts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, int] = {"ok": 0, "requests": 0}

    def add(self, key: str) -> None:
        with self._lock:
            self.values[key] = self.values.get(key, 0) + 1
            self.values["requests"] += 1


def read_head(stream: BinaryIO) -> tuple[str, str, dict[str, str]] | None:
    line = stream.readline(MAX_HEAD)
    if not line:
        return None
    method, target, _version = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    size = len(line)
    while True:
        line = stream.readline(MAX_HEAD)
        size += len(line)
        if not line or size > MAX_HEAD:
            raise ConnectionError("truncated head")
        if line in (b"\r\n", b"\n"):
            return method, target, headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


def hash_body(stream: BinaryIO, headers: dict[str, str]) -> tuple[int, str]:
    digest, total = hashlib.sha256(), 0
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int(stream.readline(1024).split(b";")[0].strip(), 16)
            if size == 0:
                while stream.readline(MAX_HEAD) not in (b"\r\n", b"\n", b""):
                    pass
                return total, digest.hexdigest()
            left = size
            while left:
                data = stream.read(min(left, CHUNK))
                if not data:
                    raise ConnectionError("short chunk")
                digest.update(data)
                left -= len(data)
            total += size
            stream.readline(16)
    left = int(headers.get("content-length", "0") or "0")
    while left:
        data = stream.read(min(left, CHUNK))
        if not data:
            raise ConnectionError("short body")
        digest.update(data)
        total += len(data)
        left -= len(data)
    return total, digest.hexdigest()


def respond(sock: socket.socket, status: str, body: bytes, ctype: str = "text/plain") -> None:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode("latin-1") + body)


class Handler(socketserver.BaseRequestHandler):
    server: BulkServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(IO_TIMEOUT)
        try:
            if self.server.tls is not None:
                sock = self.server.tls.wrap_socket(sock, server_side=True)
            stream = cast(BinaryIO, sock.makefile("rb", buffering=CHUNK))
            while self.serve_one(sock, stream):
                pass
        except (OSError, ValueError, ConnectionError, ssl.SSLError):
            pass

    def serve_one(self, sock: socket.socket, stream: BinaryIO) -> bool:
        head = read_head(stream)
        if head is None:
            return False
        method, target, headers = head
        parts = urlsplit(target)
        log, counts = self.server.log, self.server.counts
        if parts.path == "/ok":
            counts.add("ok")
            respond(sock, "200 OK", b"ok")
        elif parts.path == "/stats":
            counts.add("stats")
            respond(sock, "200 OK", json.dumps(counts.values).encode(), "application/json")
        elif parts.path == "/upload" and method in ("POST", "PUT"):
            total, digest = hash_body(stream, headers)
            record = {"event": "upload", "bytes": total, "sha256": digest}
            log.write(record)
            respond(sock, "200 OK", json.dumps(record).encode(), "application/json")
        elif parts.path == "/download":
            query = parse_qs(parts.query)
            size = int(query.get("size", ["0"])[0])
            chunked = int(query.get("chunked", ["0"])[0])
            framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
            sock.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                f"{framing}\r\n\r\n".encode()
            )
            sent_digest, sent = hashlib.sha256(), 0
            for chunk in pattern_chunks(size, chunked or CHUNK):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent_digest.update(chunk)
                sent += len(chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
            log.write({"event": "download", "bytes": sent, "sha256": sent_digest.hexdigest()})
        elif parts.path == "/echo":
            query = parse_qs(parts.query)
            size, every = int(query["size"][0]), int(query["every"][0])
            body = echo_body(size, headers.get("authorization", "").encode("latin-1"), every)
            chunked = int(query.get("chunked", ["0"])[0])
            if chunked:  # in chunks of that size, each written on its own
                sock.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for at in range(0, size, chunked):
                    piece = body[at : at + chunked]
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sock.sendall(b"0\r\n\r\n")
            else:
                respond(sock, "200 OK", body, "application/octet-stream")
            digest = hashlib.sha256(body).hexdigest()
            log.write({"event": "echo", "bytes": len(body), "sha256": digest})
        else:
            respond(sock, "404 Not Found", b"not found\n")
        return headers.get("connection", "").lower() != "close"


class BulkServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        log: EventLog,
        counts: Counts,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.log, self.counts, self.tls = log, counts, tls
        super().__init__(address, Handler)


def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--listen", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--listen-tls", action="append", default=[], metavar="HOST:PORT")
    args = parser.parse_args(argv)

    log, counts = EventLog(args.log), Counts()
    tls = tls_context(args.cert, args.key, ["http/1.1"]) if args.listen_tls else None
    servers = []
    for spec, ctx in [(s, None) for s in args.listen] + [(s, tls) for s in args.listen_tls]:
        servers.append(BulkServer(parse_hostport(spec), log, counts, ctx))
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    until_stopped_blocking(args.ready)
    for server in servers:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
