"""The usage meter of one model API answer: the answer's bytes in, the same bytes out,
usage read on the side (issue 46).

* A Server-Sent Events answer (`text/event-stream`) is split into events
  (`proxy.llm.sse`) as it streams and each event's JSON is read for usage: openai chat
  and completions chunks, the responses API's `response.completed`, anthropic's
  `message_start` and `message_delta`, gemini's `usageMetadata`.
* Any other answer (JSON, gemini's JSON-array stream) passes through at once and a copy
  of at most `MAX_JSON` bytes is read whole at the end; a longer one is estimated.

Invariants:
* Without `strip`, `feed` returns each chunk unchanged at once. With `strip` (the proxy
  added `stream_options.include_usage`), bytes are given out a whole event at a time and
  the usage chunk (`choices: []` with a `usage` object) is left out; nothing else is.
* No input makes a meter raise; memory is bounded by one event or `MAX_JSON`.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox_egress.proxy.llm import Api
from sandbox_egress.proxy.llm.sse import Event, Splitter
from sandbox_egress.proxy.llm.usage import Usage, estimate, from_object

MAX_JSON = 8 * 1024 * 1024


class Meter:
    def __init__(self, api: Api, content_type: str, strip: bool = False) -> None:
        self.api = api
        self.sse = content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
        self.strip = strip and self.sse
        self.usage = Usage()
        self.received = 0  # bytes of the answer body
        self.stripped = 0  # usage chunks left out
        self.final = False  # the answer's final usage was read (else: estimated)
        self._splitter = Splitter() if self.sse else None
        self._copy: bytearray | None = None if self.sse else bytearray()

    def feed(self, chunk: bytes) -> bytes:
        self.received += len(chunk)
        if self._splitter is None:
            self._keep(chunk)
            return chunk
        return self._events(self._splitter.feed(chunk), chunk)

    def close(self) -> bytes:
        """The end of the answer: the bytes still held, and the usage of a JSON answer."""
        if self._splitter is None:
            if self._copy is not None:
                self._read_json(bytes(self._copy))
                self._copy = None
            return b""
        return self._events(self._splitter.finish(), b"")

    def _keep(self, chunk: bytes) -> None:
        if self._copy is None:
            return
        if len(self._copy) + len(chunk) > MAX_JSON:
            self._copy = None  # too long to read whole: the answer is estimated
            return
        self._copy += chunk

    def _events(self, events: list[Event], chunk: bytes) -> bytes:
        out: list[bytes] = []
        for event in events:
            document = _decode(event.data) if event.data is not None else None
            if document is not None:
                self._read(document)
            if self.strip and _usage_chunk(document):
                self.stripped += 1
                continue
            out.append(event.raw)
        return b"".join(out) if self.strip else chunk

    def _read_json(self, body: bytes) -> None:
        document = _decode(body)
        for item in document if isinstance(document, list) else [document]:
            self._read(item)

    def _read(self, document: Any) -> None:
        found = from_object(self.api, document)
        self.usage = self.usage.merge(found)
        if found.output is not None and self.usage.complete and _final(self.api, document):
            self.final = True

    def settled(self, sent: int) -> tuple[int, int, bool]:
        """(input, output, estimated) to charge; `sent`: the request body's bytes. An answer
        without its final usage is estimated (a token per 4 bytes each way), never below
        what it reported so far."""
        if self.final:
            return self.usage.settled(sent, self.received)
        given_in = self.usage.input if self.usage.input is not None else estimate(sent)
        return given_in, max(self.usage.output or 0, estimate(self.received)), True


def _decode(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def _final(api: Api, document: Any) -> bool:
    """Whether a document carrying usage is the last word on it: anthropic's
    `message_start` and gemini's chunks before `finishReason` are running counts."""
    if not isinstance(document, dict):
        return False
    if api is Api.ANTHROPIC:
        return document.get("type") != "message_start"
    if api is Api.GEMINI:
        candidates = document.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return True
        return any(isinstance(c, dict) and c.get("finishReason") for c in candidates)
    return True


def _usage_chunk(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and document.get("choices") == []
        and isinstance(document.get("usage"), dict)
    )
