"""A test-owned model API server speaking the three wire formats of issue 46 (OpenAI,
Anthropic, Gemini), streamed and not, with the usage each test chooses.

`python -m testbed.model_server --log FILE --ready FILE --listen-tls HOST:PORT --cert C
--key K [--listen HOST:PORT]` (testbed/serving.py says what every test server shares).

Endpoints: openai `/v1/chat/completions`, `/v1/completions`, `/v1/responses`,
`/v1/embeddings`; anthropic `/v1/messages`; gemini `/v1beta|v1/models/M:generateContent`
and `:streamGenerateContent` (`?alt=sse` for events, else a JSON array); anything else 404.
A request's `X-Test-Usage: IN,OUT` chooses the usage it reports (default 10,5);
`X-Test-Cut: N` ends a stream after N pieces without its end (a cut-off answer);
`X-Test-Status: S` answers an API error of status S instead (no usage). Streams
are sent chunked, a piece at a time, so the proxy sees a real stream. The openai usage
chunk is sent only when the request asks (`stream_options.include_usage`), as OpenAI does.

Every request is logged before the answer as `{"event": "request", "method", "path",
"body", "body_len", "authorization"}` (`body` parsed when JSON, else null).
Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testbed import model_wire as wire
from testbed.serving import EventLog, arguments, parse_hostport, tls_context, until_stopped_blocking

MAX_BODY = 16 * 1024 * 1024
TEXT = "the quick brown fox jumps"
_GEMINI = re.compile(r"^/(?:v1|v1beta)/models/([^/:]+):(generateContent|streamGenerateContent)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log: EventLog

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the event log says what came

    def do_GET(self) -> None:
        self._record(b"", None)
        self._send(404, wire.JSON, [b'{"error": {"message": "not found"}}'], stream=False)

    def do_POST(self) -> None:
        raw = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), MAX_BODY))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self._record(raw, body)
        answer = self._answer(body if isinstance(body, dict) else {})
        if answer is None:
            self._send(404, wire.JSON, [b'{"error": {"message": "not found"}}'], stream=False)
            return
        (content_type, pieces), stream = answer
        status = self.headers.get("X-Test-Status")
        if status is not None:  # an API error: no usage
            error = b'{"error": {"message": "refused by the test", "type": "rate_limit"}}'
            self._send(int(status), wire.JSON, [error], stream=False)
            return
        cut = self.headers.get("X-Test-Cut")
        if cut is not None:
            pieces = pieces[: int(cut)]
        self._send(200, content_type, pieces, stream, ended=cut is None)

    def _answer(self, body: dict[str, Any]) -> tuple[tuple[str, list[bytes]], bool] | None:
        path, _, query = self.path.partition("?")
        given = (self.headers.get("X-Test-Usage") or "10,5").split(",")
        usage = (int(given[0]), int(given[1]))
        model = str(body.get("model", ""))
        stream = body.get("stream") is True
        if path in ("/v1/chat/completions", "/v1/completions"):
            options = body.get("stream_options") or {}
            asked = stream and options.get("include_usage") is True
            return wire.openai_chat(model, TEXT, usage, stream, asked), stream
        if path == "/v1/responses":
            return wire.openai_responses(model, TEXT, usage, stream), stream
        if path == "/v1/embeddings":
            return wire.embeddings(model, usage), False
        if path == "/v1/messages":
            return wire.anthropic_messages(model, TEXT, usage, stream), stream
        match = _GEMINI.match(path)
        if match is not None:
            streamed = match[2] == "streamGenerateContent"
            return wire.gemini(match[1], TEXT, usage, streamed, "alt=sse" in query), streamed
        return None

    def _record(self, raw: bytes, body: Any) -> None:
        self.log.write(
            {
                "event": "request",
                "method": self.command,
                "path": self.path,
                "body": body,
                "body_len": len(raw),
                "authorization": self.headers.get("Authorization")
                or self.headers.get("X-Api-Key")
                or self.headers.get("X-Goog-Api-Key"),
            }
        )

    def _send(
        self, status: int, content_type: str, pieces: list[bytes], stream: bool, ended: bool = True
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if not stream:
            payload = b"".join(pieces)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        if ended:
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.close_connection = True  # cut off: no last chunk


def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--listen", action="append", default=[], help="HOST:PORT, plain")
    parser.add_argument("--listen-tls", action="append", default=[], help="HOST:PORT, TLS")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args(argv)
    Handler.log = EventLog(args.log)
    servers = [ThreadingHTTPServer(parse_hostport(a), Handler) for a in args.listen]
    for address in args.listen_tls:
        server = ThreadingHTTPServer(parse_hostport(address), Handler)
        context = tls_context(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        servers.append(server)
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    until_stopped_blocking(args.ready)
    for server in servers:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
