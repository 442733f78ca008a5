"""A TLS HTTP/2 upstream that writes exactly the frames a test scripted (issue 49's attack
round on the HTTP/2 relay, D630-D636).

`H2Script` listens in a network namespace (a thread of the test process; the socket is made
inside the namespace, `nsock.in_namespace`), offers ALPN `h2` only, and per connection:
reads the client preface, answers the client's SETTINGS with an empty SETTINGS and an ACK,
and for each request HEADERS it decodes (HPACK, `hpack`), calls the script named by the
path's first segment (`/NAME/...`) with the stream id and the request's headers; the script
returns a list of steps: bytes to write in one `sendall` (one TLS record or a few), a float
to sleep, or None to close. Every frame the proxy sent is kept per connection as
(type, flags, stream, payload), so a test compares what the upstream received.
Frames are built raw (`frame`): a script may write any frame, valid or not.
Bounded: every read has a timeout, a write that makes no progress for `WRITE_TIMEOUT`
seconds ends the connection, which lives at most `LIFETIME` seconds.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import hpack

from testbed import nsock

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9,
)  # fmt: skip
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
LIFETIME = 20.0
WRITE_TIMEOUT = 5.0
Step = bytes | float | None
Script = Callable[[int, dict[str, str]], list[Step]]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def headers(stream: int, fields: list[tuple[str, str]], flags: int = END_HEADERS) -> bytes:
    return frame(HEADERS, flags, stream, hpack.Encoder().encode(fields))


def data(stream: int, payload: bytes, flags: int = 0) -> bytes:
    return frame(DATA, flags, stream, payload)


class H2Script:
    def __init__(self, namespace: str, address: tuple[str, int], cert: str, key: str) -> None:
        self.scripts: dict[str, Script] = {}
        self.received: list[list[tuple[int, int, int, bytes]]] = []  # per connection
        self.paths: list[list[str]] = []  # per connection, the requests' paths
        # Per connection accepted from now, in order: seconds before its TLS handshake.
        self.handshake_delays: list[float] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.set_alpn_protocols(["h2"])
        self._context = context
        with nsock.in_namespace(namespace):
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(address)
        self._listener.listen(16)
        self._listener.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            frames: list[tuple[int, int, int, bytes]] = []
            paths: list[str] = []
            self.received.append(frames)
            self.paths.append(paths)
            delay = self.handshake_delays.pop(0) if self.handshake_delays else 0.0
            threading.Thread(
                target=self._serve, args=(sock, frames, paths, delay), daemon=True
            ).start()

    def _serve(
        self,
        raw: socket.socket,
        frames: list[tuple[int, int, int, bytes]],
        paths: list[str],
        delay: float = 0.0,
    ) -> None:
        deadline = time.monotonic() + LIFETIME
        decoder = hpack.Decoder()
        block: dict[int, bytes] = {}
        try:
            time.sleep(min(delay, WRITE_TIMEOUT))
            raw.settimeout(5)
            sock = self._context.wrap_socket(raw, server_side=True)
            sock.settimeout(0.2)
            buffer = b""
            preface = False
            while time.monotonic() < deadline and not self._stop.is_set():
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                buffer += chunk
                if not preface:
                    if len(buffer) < len(PREFACE):
                        continue
                    buffer, preface = buffer[len(PREFACE) :], True
                    sock.sendall(frame(SETTINGS, 0, 0))
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3])
                    if len(buffer) < 9 + length:
                        break
                    kind, flags = buffer[3], buffer[4]
                    stream = int.from_bytes(buffer[5:9]) & 0x7FFFFFFF
                    payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                    frames.append((kind, flags, stream, payload))
                    if kind == SETTINGS and not flags & ACK:
                        sock.sendall(frame(SETTINGS, ACK, 0))
                    elif kind in (HEADERS, CONTINUATION):
                        if kind == HEADERS and flags & PADDED:
                            payload = payload[1 : len(payload) - payload[0]]
                        if kind == HEADERS and flags & 0x20:  # PRIORITY
                            payload = payload[5:]
                        block[stream] = block.get(stream, b"") + payload
                        if flags & END_HEADERS:
                            fields = {str(k): str(v) for k, v in decoder.decode(block.pop(stream))}
                            paths.append(fields.get(":path", ""))
                            if not self._run(sock, stream, fields):
                                return
        except (OSError, ValueError, hpack.HPACKError):
            return
        finally:
            with contextlib.suppress(OSError):
                raw.close()

    def _run(self, sock: Any, stream: int, fields: dict[str, str]) -> bool:
        name = fields.get(":path", "/").lstrip("/").split("/", 1)[0].split("?", 1)[0]
        script = self.scripts.get(name)
        if script is None:
            sock.sendall(headers(stream, [(":status", "404")], END_HEADERS | END_STREAM))
            return True
        for step in script(stream, fields):
            if step is None:
                return False
            if isinstance(step, float):
                time.sleep(step)
            else:  # a proxy that stops reading holds a write up to WRITE_TIMEOUT, then it ends
                sock.settimeout(WRITE_TIMEOUT)
                sock.sendall(step)
                sock.settimeout(0.2)
        return True
