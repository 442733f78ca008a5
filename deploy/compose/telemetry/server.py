"""Example telemetry upstream for the compose file: HTTPS, checks the bearer token.

It accepts ``POST /api/v1/agent-events`` (the audit-logging hook's payload) and
prints one JSON line per request: the path, whether the ``Authorization``
header carried the expected token, the tool named in the payload and the body
size. The expected token is read from ``--token-file`` (a compose secret); the
token and the received header value are never printed.

Answers: 200 ``{"received": true}`` with the right token, 401 without it, 404
for another path, 413 above 1 MiB.
"""

from __future__ import annotations

import argparse
import hmac
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PATH = "/api/v1/agent-events"
MAX_BODY = 1 << 20


def _tool(body: bytes) -> str | None:
    try:
        event: Any = json.loads(body)
        name = event["tool_call"]["name"]
    except (ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


class Handler(BaseHTTPRequestHandler):
    expected = b""
    server_version = "telemetry-example"
    timeout = 30  # seconds of socket inactivity before a handler gives up

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._answer(413, {"error": "too large"})
            return
        body = self.rfile.read(length)
        received = (self.headers.get("Authorization") or "").encode("utf-8", "replace")
        authorized = bool(self.expected) and hmac.compare_digest(received, self.expected)
        line = {
            "path": self.path,
            "authorized": authorized,
            "tool": _tool(body),
            "bytes": len(body),
        }
        print(json.dumps(line), flush=True)
        if self.path != PATH:
            self._answer(404, {"error": "not found"})
        elif not authorized:
            self._answer(401, {"error": "missing or wrong bearer token"})
        else:
            self._answer(200, {"received": True})

    def _answer(self, status: int, document: dict[str, Any]) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one JSON line per request is printed above; no header values


class Server(ThreadingHTTPServer):
    # Handler threads are joined on close (each is bounded by Handler.timeout).
    daemon_threads = False
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed TLS handshake or a dropped client: one line, no traceback.
        print(json.dumps({"client_error": type(sys.exc_info()[1]).__name__}), flush=True)


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(description="Example telemetry upstream (HTTPS).")
    result.add_argument("--listen", default="0.0.0.0:8443", help="HOST:PORT")
    result.add_argument("--cert", required=True, type=Path)
    result.add_argument("--key", required=True, type=Path)
    result.add_argument("--token-file", required=True, type=Path)
    return result


def build_server(args: argparse.Namespace) -> Server:
    """The listening HTTPS server for parsed arguments (port 0 picks a free port)."""
    token = args.token_file.read_text(encoding="utf-8").removesuffix("\n")
    expected = f"Bearer {token}".encode() if token else b""  # an empty token authorizes nothing
    handler = type("ConfiguredHandler", (Handler,), {"expected": expected})
    host, _, port = args.listen.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server = Server((host, int(port)), handler)
    # The handshake happens in the handler thread, not in the accept loop.
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    return server


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    server = build_server(args)
    print(f"telemetry: listening on https://{args.listen}{PATH}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
