"""Lingering close: a refusal answered before the request's body was read reaches the
client (docs/configuration.md#lingering-close, D350-D351).

mitmproxy reads a request's whole body before it sends a response an addon set, so a
refused upload of unknown or large size used to be cut unread (D15, D25), and the
client's TCP stack, finding the connection closed while it still sent, reset the
answer away: boto3 printed `SSLError: EOF`, curl `Send failure`. Here the refusal is
sent at once instead, and the body is read and dropped:

* `answer_early(flow, response)` (from the request stage, on a refusal it will not
  read the body of) sets the answer, drops `Expect: 100-continue` (no `100` is sent:
  a client that waits for one reads the refusal instead of sending the body) and, on
  HTTP/1, says `Connection: close`;
* the wrapper of `HttpStream._handle_event` then, after mitmproxy's `requestheaders`
  handling, sends the answer whole (`responseheaders` and `response` hooks, so the
  audit line is written as for any refusal), and:
  - HTTP/2 and HTTP/3: ends the stream with `RST_STREAM(NO_ERROR)` after the answer
    (RFC 9113 8.1: the client stops sending without error); the connection goes on;
  - HTTP/1: drops each body event mitmproxy's own parser yields (Content-Length or
    chunked, inside TLS or plain) until the body's end, when mitmproxy's HTTP/1 layer
    closes the connection as the answer said. A body that goes on past
    `LINGER_BYTES`, or is not over `LINGER_S` after the answer, is cut (the
    connection closed): a refused upload cannot keep the proxy reading.

Nothing read is kept, and nothing of the request goes upstream: no upstream
connection is opened for it. The wrapper is a plain function that hands every other
event to the wrapped handler unchanged (no extra generator on the hot path).
`install` wraps whatever `HttpStream._handle_event` is then (after `addons.layers.pushgate`);
tests/addons/test_linger.py pins the mitmproxy internals used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import h2.errors
from mitmproxy import http
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers.http import DropStream, HttpLayer, HttpStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    RequestTrailers,
    ResponseEndOfMessage,
)
from mitmproxy.proxy.layers.http._hooks import HttpResponseHeadersHook
from mitmproxy.proxy.layers.http._http2 import Http2Server

from sandbox_egress.addons import mitm
from sandbox_egress.addons.layers.workarounds import INNER, Commands, hang_up, wrapped_in

log = logging.getLogger("egress")

LINGER = "egress.linger"  # flow.metadata: answer now, then drop the body
LINGER_BYTES = 16 * 1024 * 1024  # body bytes read and dropped after an early answer
LINGER_S = 10.0  # ... for at most this long after the answer
_STATE = "_egress_linger"  # on the HttpStream while its body is dropped
_MARK = "_egress_lingering"
_BODY = (RequestData, RequestTrailers, RequestEndOfMessage)
_inner: Callable[[HttpStream, events.Event], Commands] | None = None


@dataclass
class Lingering:
    timer: commands.RequestWakeup | None = None
    dropped: int = 0


def install() -> None:
    """Wrap `HttpStream._handle_event` (idempotent)."""
    global _inner
    if installed():
        return
    _inner = HttpStream._handle_event
    HttpStream._handle_event = _lingering  # type: ignore[method-assign]


def installed() -> bool:
    return wrapped_in(HttpStream._handle_event, _MARK)


def answer_early(flow: http.HTTPFlow, response: http.Response) -> None:
    """Answer `flow` with `response` before its body is read, then drop the body (module
    doc). Without the wrapper (addon tests) the flow is killed unread, as before D350."""
    flow.request.stream = False
    if not installed():
        mitm.kill(flow)
        if not (flow.request.is_http2 or flow.request.is_http3):
            asyncio.get_running_loop().call_soon(hang_up, flow.client_conn)
        return
    flow.request.headers.pop("expect", None)  # mitmproxy would send `100 Continue`
    if not (flow.request.is_http2 or flow.request.is_http3):
        response.headers["Connection"] = "close"
    flow.response = response
    flow.metadata[LINGER] = True


def _lingering(self: HttpStream, event: events.Event) -> Commands:
    if _inner is None:  # pragma: no cover - only reachable through install()
        raise RuntimeError("the lingering close is not installed")
    state: Lingering | None = getattr(self, _STATE, None)
    if state is not None:
        if isinstance(event, _BODY):
            return _drop(self, state, event)
        if isinstance(event, events.Wakeup) and event.command is state.timer:
            return _cut(self, "was not over")
    if type(event) is RequestHeaders:
        return _after_headers(self, event)
    return _inner(self, event)


_lingering._egress_lingering = True  # type: ignore[attr-defined]
setattr(_lingering, INNER, lambda: _inner)


def _after_headers(self: HttpStream, event: RequestHeaders) -> Commands:
    if _inner is None:  # pragma: no cover
        raise RuntimeError("the lingering close is not installed")
    yield from _inner(self, event)
    flow = getattr(self, "flow", None)
    if flow is None or not flow.metadata.pop(LINGER, False):
        return
    if flow.response is None or self.client_state != self.state_consume_request_body:
        return  # killed, or mitmproxy went another way: nothing to answer here
    yield from _answer(self, flow)


def _answer(self: HttpStream, flow: http.HTTPFlow) -> Commands:
    """mitmproxy's answer to a response an addon set, sent before the body is read."""
    if flow.response is None:  # pragma: no cover - checked by the caller
        return
    flow.response.timestamp_start = time.time()
    yield HttpResponseHeadersHook(flow)
    if (yield from self.check_killed(True)):
        return
    state = Lingering()
    setattr(self, _STATE, state)
    yield from self.send_response()  # the `response` hook (the audit line), head, body
    if self.server_state != self.state_done:  # pragma: no cover - killed in `response`
        delattr(self, _STATE)
        return
    yield SendHttp(ResponseEndOfMessage(self.stream_id), self.context.client)
    flow.live = False
    if flow.request.is_http2 or flow.request.is_http3:
        delattr(self, _STATE)
        yield from _reset_without_error(self)
        # Body events already queued for the stream (it was paused for the hook) are
        # dropped there: `state_errored` takes any event.
        self.client_state = self.state_errored
        yield DropStream(self.stream_id)
        return
    state.timer = commands.RequestWakeup(LINGER_S)
    yield state.timer


def _drop(self: HttpStream, state: Lingering, event: events.Event) -> Commands:
    if isinstance(event, RequestData):
        state.dropped += len(event.data)
        if state.dropped > LINGER_BYTES:
            yield from _cut(self, "went on past the bound")
    elif isinstance(event, RequestEndOfMessage):
        # mitmproxy's HTTP/1 layer closes the connection next (`Connection: close`).
        delattr(self, _STATE)
        self.client_state = self.state_done
        yield DropStream(self.stream_id)


def _cut(self: HttpStream, why: str) -> Commands:
    """Close the client connection of a body dropped too long (`LINGER_BYTES`, `LINGER_S`)."""
    if getattr(self, _STATE, None) is None:
        return
    delattr(self, _STATE)
    log.info("a refused request's body %s of the lingering close; connection closed", why)
    self.client_state = self.state_errored
    yield commands.CloseConnection(self.context.client)
    yield DropStream(self.stream_id)
    try:  # mitmproxy may leave the socket open after a close it did not start (D15)
        asyncio.get_running_loop().call_soon(hang_up, self.context.client)
    except RuntimeError:  # no loop: the layer tests
        log.debug("no loop to hang up a lingering connection on")


def _reset_without_error(self: HttpStream) -> Commands:
    """`RST_STREAM(NO_ERROR)` on the client's HTTP/2 connection, after the answer: mitmproxy
    offers no such reset, so it is written through the connection's h2 state machine."""
    for above in self.context.layers:
        if isinstance(above, HttpLayer):
            server = above.connections.get(self.context.client)
            if isinstance(server, Http2Server) and not server.is_closed(self.stream_id):
                server.h2_conn.reset_stream(self.stream_id, h2.errors.ErrorCodes.NO_ERROR)
                server.streams.pop(self.stream_id, None)
                yield commands.SendData(self.context.client, server.h2_conn.data_to_send())
            return
