"""mitmproxy's own error pages, replaced by the product's JSON (D354).

mitmproxy answers some requests itself, before any hook decides them, with an HTML page
(`Server: mitmproxy`, `Content-Type: text/html`, the error's text, which can quote the
request). Two of those paths are replaced here (`install`):

* HTTP/1: `_http1.make_error_response` (a request head it cannot parse, a request its
  validation refuses, an upstream error no hook answered) becomes the same status with
  the product's JSON: `bad_request` for a 4xx, `upstream_reset` for a 5xx, `Connection:
  close` as before (mitmproxy closes the connection after it);
* HTTP/2 and HTTP/3: `HttpStream.check_invalid` (the request's validation: a scheme
  other than http/https, a forbidden header) sends the error through the stream's
  layer, which writes the page; the wrapper sends the product's 400 `bad_request`
  instead. An invalid upstream response keeps mitmproxy's path, which `addons.upstream`
  answers (`upstream_reset`).

The host named in the body is the request's, when there is one; the engine's message
is never shown.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import commands
from mitmproxy.proxy.layers.http import HttpStream, SendHttp, _http1
from mitmproxy.proxy.layers.http._events import (
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)

from sandbox_egress.addons import mitm
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.proxy.decision import MESSAGES, Decision, Reason

_original_error_response = _http1.make_error_response
_original_check_invalid = HttpStream.check_invalid


def install() -> None:
    _http1.make_error_response = _error_response
    HttpStream.check_invalid = _check_invalid  # type: ignore[method-assign]


def _error_response(status_code: int, message: str = "") -> bytes:
    """mitmproxy's HTTP/1 error page, as the product's JSON (`message` is not shown: it
    can quote the request's bytes)."""
    reason = Reason.BAD_REQUEST if status_code < 500 else Reason.UPSTREAM_RESET
    error = "egress_denied" if status_code < 500 else "egress_failed"
    body = {"error": error, "reason": reason.value, "message": MESSAGES[reason], "host": ""}
    response = http.Response.make(
        status_code,
        json.dumps(body).encode() + b"\n",
        {
            "Content-Type": "application/json",
            "X-Egress-Denied": reason.value,
            "Connection": "close",
        },
    )
    return mitm.assemble_response(response)


def _check_invalid(self: HttpStream, request: bool) -> Generator[commands.Command, Any, bool]:
    inner = _original_check_invalid(self, request)
    flow = self.flow
    multiplexed = flow.request.is_http2 or flow.request.is_http3
    reply: Any = None
    while True:
        try:
            command = inner.send(reply)
        except StopIteration as stop:
            return bool(stop.value)
        page = (
            request
            and multiplexed
            and isinstance(command, SendHttp)
            and isinstance(command.event, ResponseProtocolError)
            and command.connection is self.context.client
        )
        if not page:
            reply = yield command
            continue
        answer = refusal_response(
            Decision.deny(Reason.BAD_REQUEST), flow.request.host, flow.request.method
        )
        answer.status_code = 400
        client, stream_id = self.context.client, self.stream_id
        yield SendHttp(ResponseHeaders(stream_id, answer, False), client)
        yield SendHttp(ResponseData(stream_id, answer.raw_content or b""), client)
        yield SendHttp(ResponseEndOfMessage(stream_id), client)
        reply = None
