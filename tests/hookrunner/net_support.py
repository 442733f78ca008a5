"""Real local servers for http hook tests: an HTTPS endpoint and a CONNECT proxy.

Both listen on 127.0.0.1 only, record what reached them, and stop (joining
their threads, ending any slow reply) when their context manager exits.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0  # before the status line
    drip: float | None = None  # send the body one byte per `drip` seconds


@dataclass
class HttpsServer:
    reply: Reply | Callable[[Received], Reply] = field(default_factory=Reply)
    received: list[Received] = field(default_factory=list)
    port: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        # The handshake happens on the handler's thread, not in the accept loop.
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address


@contextlib.contextmanager
def https_server(
    context: ssl.SSLContext, reply: Reply | Callable[[Received], Reply] = Reply()
) -> Iterator[HttpsServer]:
    state = HttpsServer(reply)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            request = Received(
                "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
            )
            state.received.append(request)
            reply = state.reply(request) if callable(state.reply) else state.reply
            if reply.delay and state.stop.wait(reply.delay):
                return
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if reply.drip is None:
                self.wfile.write(reply.body)
                return
            for byte in reply.body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if state.stop.wait(reply.drip):
                    return

    server = _TlsServer(("127.0.0.1", 0), Handler)
    server.context = context
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class ConnectProxy:
    refuse: bool = False
    connects: list[str] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def connect_proxy(refuse: bool = False) -> Iterator[ConnectProxy]:
    """A minimal CONNECT proxy that only tunnels to 127.0.0.1."""
    state = ConnectProxy(refuse)
    stop = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            client: socket.socket = self.request
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            auth = [
                v.strip()
                for n, _, v in (h.partition(":") for h in lines[1:])
                if n.lower() == "proxy-authorization"
            ]
            state.connects.append(target)
            state.auth.append(auth[0] if auth else None)
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or state.refuse or host != "127.0.0.1":
                client.sendall(
                    b"HTTP/1.1 403 Forbidden\r\nX-Egress-Denied: not_allowlisted\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                return
            with socket.create_connection((host, int(port)), timeout=5) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                _relay(client, upstream, stop)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


def _relay(a: socket.socket, b: socket.socket, stop: threading.Event) -> None:
    peers = {a: b, b: a}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        while not stop.is_set():
            for key, _ in selector.select(0.05):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                peers[sock].sendall(data)


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
