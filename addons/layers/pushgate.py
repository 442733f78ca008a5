"""The push gate on mitmproxy's HTTP stream: a git push of any size is judged on its
command list before anything of it goes upstream, then streamed on (docs/decisions.md
D180).

mitmproxy 12 (`proxy/layers/http/__init__.py`) sends a streamed request's head upstream
as soon as the `requestheaders` hook returns, before the first body byte; a buffered
body it holds whole and, past `stream_large_bodies`, switches to streaming unjudged. So
`addons.gitpush.hold` asks for the buffered state (no upstream connection yet) and this
module wraps `HttpStream._handle_event`: while a push is held, its body events never
reach mitmproxy's buffer. The first bytes are fed to `proxy.gitpush.CommandReader`
(de-chunked already: HTTP/1 chunked or sized, HTTP/2 DATA frames alike) until it
answers, and the gate's `judge` decides:

* allowed: the stream callable `judge` set goes on the request, mitmproxy's own
  `start_request_stream` opens the upstream connection and sends the head, the held
  bytes follow, and every later chunk streams through unheld (and metered);
* refused: `judge` has set the answer (git's report-status, or the JSON 403). The rest
  of the body is read and dropped, and at its end mitmproxy answers as for any response
  an addon set, so `git push` reads the reason per ref. A refused body longer than
  `DRAIN_LIMIT` is cut instead (the flow killed, the client connection closed).

A command list not complete `COMMANDS_TIMEOUT_S` after the head (a client that stalls
while the push is held, with no upstream to time it out) is refused and cut: the gate
asks mitmproxy for a wakeup once the push is held.

`install` wraps whatever `HttpStream._handle_event` is then (after `addons.layers.limits`);
`hold` refuses to gate a push when the wrapper is not installed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy import http
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers.http import HttpStream
from mitmproxy.proxy.layers.http._events import RequestData, RequestEndOfMessage, RequestHeaders

from sandbox_egress.addons import mitm
from sandbox_egress.addons.layers.workarounds import INNER, Commands, hang_up, wrapped_in
from sandbox_egress.proxy.clauses.git import CommandReader
from sandbox_egress.proxy.clauses.git import Commands as PushCommands
from sandbox_egress.proxy.limits import HEAD_TIMEOUT_S

log = logging.getLogger("egress")

GATE = "egress.push_gate"  # flow.metadata key: the push held until its command list is judged
DRAIN_LIMIT = 1024**3  # bytes of a refused push read (and dropped) so that git reads why
COMMANDS_TIMEOUT_S = HEAD_TIMEOUT_S  # a command list is part of what decides the request
_MARK = "_egress_push_gate"
_WAKEUP = "_egress_push_wakeup"  # the stream's timer command, so its Wakeup is ours alone
_inner: Callable[[HttpStream, events.Event], Commands] | None = None

Judge = Callable[[PushCommands | str], bool]  # True: stream on (the stream callable is set)


@dataclass
class Gate:
    judge: Judge
    reader: CommandReader = field(default_factory=CommandReader)
    refused: bool = False
    drained: int = 0


def install() -> None:
    """Wrap `HttpStream._handle_event` (idempotent)."""
    global _inner
    if installed():
        return
    _inner = HttpStream._handle_event
    HttpStream._handle_event = _gated  # type: ignore[method-assign]


def installed() -> bool:
    return wrapped_in(HttpStream._handle_event, _MARK)


def hold(flow: http.HTTPFlow, judge: Judge) -> bool:
    """Gate the push's body: nothing goes upstream until `judge` allowed its command list.
    False when the gate is not installed (the caller refuses the push)."""
    if not installed():
        return False
    flow.request.stream = False
    flow.metadata[GATE] = Gate(judge)
    return True


def _gated(self: HttpStream, event: events.Event) -> Commands:
    if _inner is None:  # pragma: no cover - only reachable through install()
        raise RuntimeError("the push gate is not installed")
    if isinstance(event, events.Wakeup) and event.command is getattr(self, _WAKEUP, None):
        yield from _overdue(self)
        return
    gate = _held(self) if isinstance(event, (RequestData, RequestEndOfMessage)) else None
    if gate is None:
        yield from _inner(self, event)
        if isinstance(event, RequestHeaders) and _held(self):
            timer = commands.RequestWakeup(COMMANDS_TIMEOUT_S)
            setattr(self, _WAKEUP, timer)
            yield timer
        return
    ended = isinstance(event, RequestEndOfMessage)
    if gate.refused:
        if ended:
            yield from _inner(self, event)  # mitmproxy answers the response `judge` set
        elif isinstance(event, RequestData):
            yield from _drain(self, gate, len(event.data))
        return
    data = event.data if isinstance(event, RequestData) else b""
    answer = gate.reader.feed(data, ended)
    if answer is None:
        return
    allowed = _judge(gate, answer)
    if allowed and self.flow.response is None:
        del self.flow.metadata[GATE]
        held = bytes(gate.reader.held)
        yield from self.start_request_stream()  # connects, sends the head
        if self.client_state == self.state_stream_request_body:
            if held:
                yield from _inner(self, RequestData(self.stream_id, held))
            if ended:
                yield from _inner(self, event)
        return
    gate.refused = True
    gate.reader = CommandReader()  # the held bytes are dropped
    if self.flow.response is None:
        yield from _cut(self)
    elif ended:
        yield from _inner(self, event)


_gated._egress_push_gate = True  # type: ignore[attr-defined]
setattr(_gated, INNER, lambda: _inner)


def _held(self: HttpStream) -> Gate | None:
    """The gate of this stream's held push, while mitmproxy would buffer its body."""
    flow = getattr(self, "flow", None)
    gate = flow.metadata.get(GATE) if flow is not None else None
    if not isinstance(gate, Gate) or self.client_state != self.state_consume_request_body:
        return None
    return gate


def _overdue(self: HttpStream) -> Commands:
    """The timer: a push still waiting for its command list is refused and cut."""
    gate = _held(self)
    if gate is None or gate.refused:
        return  # judged in time (a refused push being drained has its own bound)
    _judge(gate, f"the command list was not complete within {COMMANDS_TIMEOUT_S:g} s")
    yield from _cut(self)


def _judge(gate: Gate, answer: PushCommands | str) -> bool:
    try:
        return gate.judge(answer)
    except Exception:  # noqa: BLE001 - fail closed: the push is refused
        log.exception("policy error judging a git push")
        return False


def _drain(self: HttpStream, gate: Gate, size: int) -> Commands:
    gate.drained += size
    if gate.drained > DRAIN_LIMIT:
        yield from _cut(self)


def _cut(self: HttpStream) -> Commands:
    """Kill the flow (an HTTP/2 stream is reset) and close an HTTP/1 client connection."""
    self.flow.metadata.pop(GATE, None)
    mitm.kill(self.flow)
    yield from self.check_killed(True)
    if not (self.flow.request.is_http2 or self.flow.request.is_http3):
        try:
            asyncio.get_running_loop().call_soon(hang_up, self.flow.client_conn)
        except RuntimeError:  # no loop: the layer tests
            log.debug("no loop to hang up a cut push on")
