"""A scripted stand-in for the Anthropic Messages API, so that the real Claude Code CLI can run
here without a model (tests/hookrunner/ax/test_claude_cli.py). Only the model is mocked.

`python -m testbed.fake_model --log FILE --ready FILE --port-file FILE --script FILE`,
inside the network namespace the test created (testbed/serving.py says what every test
server shares). The script is a JSON list of turns, each `{"tool_use": {"name", "input"}}`
or `{"text": "..."}`. A request of the main conversation (one that offers the Bash tool) is
answered with turn N, N the number of assistant messages it already carries; any other
request (a side query of the CLI: a title, a summary) with the text `ok`; past the script
it is the last turn. Answers stream as Server-Sent Events when the request asks
(`"stream": true`), else they are one JSON message; `/v1/messages/count_tokens` answers a
count; any other path 404.

Every request is appended to `--log` as one JSON line `{"event": "request", "method",
"path", "body", "turn"}` (the body parsed, `turn` the script index answered or null),
flushed before the answer is sent. No credentials are checked: the CLI's key is a dummy.
Standard library only.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testbed.serving import EventLog, arguments, parse_hostport, until_stopped_blocking

MAX_BODY = 16 * 1024 * 1024
MODEL = "claude-fake-model"


def turn_of(body: dict[str, Any]) -> int | None:
    """The script index a request of the main conversation is at, None for a side query."""
    tools = body.get("tools") or []
    if not any(isinstance(t, dict) and t.get("name") == "Bash" for t in tools):
        return None
    messages = body.get("messages") or []
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def content_of(turn: dict[str, Any], index: int) -> tuple[list[dict[str, Any]], str]:
    """The content blocks of `turn` and its stop reason."""
    if "tool_use" in turn:
        use = turn["tool_use"]
        block = {"type": "tool_use", "id": f"toolu_fake{index:02d}", **use}
        return [block], "tool_use"
    return [{"type": "text", "text": turn["text"]}], "end_turn"


def message(blocks: list[dict[str, Any]], stop: str, index: int) -> dict[str, Any]:
    return {
        "id": f"msg_fake{index:02d}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def events(blocks: list[dict[str, Any]], stop: str, index: int) -> list[dict[str, Any]]:
    """The stream of `message` as the API sends it: start, each block in deltas, stop."""
    start = message([], "", index) | {"stop_reason": None}
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(blocks):
        if block["type"] == "tool_use":
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            empty = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        out += [
            {"type": "content_block_start", "index": i, "content_block": empty},
            {"type": "content_block_delta", "index": i, "delta": delta},
            {"type": "content_block_stop", "index": i},
        ]
    out += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: list[dict[str, Any]] = []
    log: EventLog
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the event log says what came

    def do_GET(self) -> None:
        self._record(None, None)
        self._send(404, "application/json", b'{"type":"error","error":{"type":"not_found_error"}}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(min(length, MAX_BODY))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"unparsed": raw[:1000].decode("utf-8", "replace")}
        path = self.path.split("?", 1)[0]
        if path == "/v1/messages/count_tokens":
            self._record(body, None)
            self._send(200, "application/json", b'{"input_tokens": 10}')
            return
        if path != "/v1/messages":
            self.do_GET()
            return
        index = turn_of(body)
        self._record(body, index)
        if index is None:
            turn: dict[str, Any] = {"text": "ok"}
        else:
            turn = self.script[min(index, len(self.script) - 1)]
        blocks, stop = content_of(turn, index or 0)
        if not body.get("stream"):
            payload = json.dumps(message(blocks, stop, index or 0)).encode()
            self._send(200, "application/json", payload)
            return
        stream = "".join(
            f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"
            for e in events(blocks, stop, index or 0)
        )
        self._send(200, "text/event-stream", stream.encode())

    def _record(self, body: Any, index: int | None) -> None:
        record = {"event": "request", "method": self.command, "path": self.path}
        self.log.write(record | {"body": body, "turn": index})

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(payload)


def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any)")
    parser.add_argument("--port-file", required=True, help="the bound port is written here")
    parser.add_argument("--script", required=True, help="the turns, a JSON list")
    args = parser.parse_args(argv)
    with open(args.script, encoding="utf-8") as script:
        Handler.script = json.load(script)
    Handler.log = EventLog(args.log)
    server = ThreadingHTTPServer(parse_hostport(args.listen), Handler)
    server.daemon_threads = True
    with open(args.port_file, "w", encoding="utf-8") as out:
        out.write(f"{server.server_address[1]}\n")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    until_stopped_blocking(args.ready)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
