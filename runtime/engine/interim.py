"""An upstream's interim answer (1xx but 101) is not taken for its final answer (D673).

What it replaces: `Http1Client.read_headers`, which it calls after dropping the interim
answer heads the receive buffer begins with. Why: mitmproxy's HTTP/1 client reads the
first answer head as the answer; a `100 Continue` or `103 Early Hints` has no body, so the
exchange was done there. Its `200` then reached a client that no longer held a request
("Unexpected data from server": the connection closed, the sandbox's client, which reads
a 1xx as interim, then took the next request's answer for this one); and a request
pipelined behind it went out at once (D670's kept request), so the upstream's `200` for
the first request was handed to the second, with its audit line, its response checks and
its status (the first logged as `100`). RFC 9110 15.2: a client must read any number of
1xx before the final answer. A proxy must forward them unless it asked for them; this one
drops them: mitmproxy removes `Expect: 100-continue` and answers it itself, and a 1xx
through the layers would be a second answer to one flow (hooks, audit). A sandbox's client
loses only early hints.

An empty line before the answer head is dropped the same way (D674): mitmproxy's reader
(h11's `ReceiveBuffer`) takes one per read and then waits, so an answer behind it in the
same read was left unread (the request hung until a timeout).

Invariants: only while a request is outstanding; only whole heads that mitmproxy's parser
reads as HTTP/1 answers of status 100-199 but 101 (an upgrade stays mitmproxy's); a head
not yet whole, or anything else, is left to mitmproxy's reader as it was. The test that
fails when mitmproxy changes under it:
tests/runtime/test_interim.py::test_mitmproxy_takes_an_interim_answer_for_the_answer.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from h11._receivebuffer import ReceiveBuffer, blank_line_regex
from mitmproxy.net.http import http1
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http import _http1

ORIGINAL_READ_HEADERS = _http1.Http1Client.read_headers


def interim_length(buf: ReceiveBuffer) -> int:
    """The length of the interim answer head `buf` begins with, else 0."""
    data: bytearray = buf._data  # h11's own bytes: no copy of a whole read
    if bytes(data[:7]) not in (b"HTTP/1.", b"http/1.") or data[9:10] != b"1":
        return 0
    match = blank_line_regex.search(data)
    if match is None:
        return 0
    head = ReceiveBuffer()
    head += bytes(data[: match.end()])
    lines = head.maybe_extract_lines()
    try:
        status = http1.read_response_head([bytes(x) for x in lines or []]).status_code
    except ValueError:
        return 0
    return match.end() if 100 <= status < 200 and status != 101 else 0


def _empty_line(buf: ReceiveBuffer) -> int:
    """The length of the empty line `buf` begins with, else 0 (D674)."""
    data: bytearray = buf._data
    return 2 if data[:2] == b"\r\n" else 1 if data[:1] == b"\n" else 0


def _read_headers(self: Any, event: events.ConnectionEvent) -> Generator[Any, Any, None]:
    if isinstance(event, events.DataReceived) and self.request is not None:
        while length := interim_length(self.buf) or _empty_line(self.buf):
            self.buf.maybe_extract_at_most(length)
    yield from ORIGINAL_READ_HEADERS(self, event)


def install() -> None:
    """From now on, an upstream's interim answers are dropped before its answer is read
    (idempotent)."""
    _http1.Http1Client.read_headers = _read_headers  # type: ignore[method-assign]
