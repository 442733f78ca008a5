"""A smart-HTTP git server for the tests: `git http-backend` behind a small HTTPS CGI host.

    python testbed/git_server.py --root DIR --listen IP:PORT --cert C --key K --ready FILE
    python testbed/git_server.py --root DIR --listen IP:PORT --plain --ready FILE

Every request runs `git http-backend` once (CGI/1.1: the request body on stdin, the
`Status:` and headers it prints become the response). Receive-pack is enabled for every
repository under --root (`REMOTE_USER` is set), as an authenticated push to a forge is.
`--plain` serves plain HTTP instead (no certificate). Each request is logged to stderr as `METHOD path LENGTH` as soon as its head is read, so a test
can tell what reached it; a request body is read sized or chunked.
"""

from __future__ import annotations

import argparse
import http.server
import os
import ssl
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = ""

    def do_GET(self) -> None:
        self.cgi()

    def do_POST(self) -> None:
        self.cgi()

    def cgi(self) -> None:
        length = self.headers.get("Content-Length") or "chunked"
        print(f"{self.command} {self.path} {length}", file=sys.stderr, flush=True)  # the head
        path, _, query = self.path.partition("?")
        body = self.body()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "agent",
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60
        )
        head, _, content = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def body(self) -> bytes:
        """The request body, sized or chunked (git sends a push over 1 MiB chunked)."""
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    def log_message(self, format: str, *args: object) -> None:
        pass  # each request is logged once its head is read (`cgi`)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--plain", action="store_true", help="HTTP, not HTTPS")
    parser.add_argument("--ready", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    Handler.root = args.root
    server = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    if not args.plain:
        if not (args.cert and args.key):
            parser.error("--cert and --key are needed for HTTPS (or --plain)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    Path(args.ready).write_text("ready\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
