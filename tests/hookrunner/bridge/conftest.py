"""What the bridge's tests share: a loopback stand-in of the proxy's documented API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Answer = tuple[int, Any]


class StandIn:
    """A loopback HTTP server answering each (method, path) from a script, recording
    every request (method, target, headers, body)."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[Answer]] = {}
        self.seen: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                stand_in.seen.append({"method": self.command, "target": self.path,
                                      "headers": dict(self.headers), "body": body})  # fmt: skip
                queue = stand_in.script.get((self.command, self.path.split("egress.invalid")[-1]))
                status, document = queue.pop(0) if queue else (404, {"error": "not_found"})
                data = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    made = StandIn()
    try:
        yield made
    finally:
        made.close()
