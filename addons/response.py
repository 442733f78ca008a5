"""The response stage: clean what an upstream answers, then write the request's audit line.

Nothing is decided here: the request stage decided which secrets were injected, and
only those can be echoed back. `responseheaders` drops a `101` that is not the WebSocket
the request asked for (D526), strips an upstream's `X-Egress-Denied`, redacts the
secrets in headers (dropping a field named after one, D527) and in the reason phrase
(D528), and streams the body (masking them in identity bodies, D32; an injected request
asked for identity, so a compressed or transfer-coded answer to it is dropped, D99,
D520); `response` redacts trailers; `websocket_message` masks them in a server's
message on a WebSocket whose upgrade carried one (D525); `response` and `error` write
the audit line. What could not be cleaned is never forwarded: the flow is killed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from mitmproxy import http
from mitmproxy.net.http import status_codes

from sandbox_egress.addons import mitm
from sandbox_egress.addons.auditing import Where, address_text
from sandbox_egress.addons.clauses import ADAPTERS, Turn
from sandbox_egress.addons.shared import FLOW_KEY, FlowState, Shared, counter
from sandbox_egress.proxy.decision import Stage
from sandbox_egress.proxy.outbound import encoded_answer, unasked_switch
from sandbox_egress.proxy.values.redact import BodyMatcher, Redactor

log = logging.getLogger("egress")

DENIED_HEADER = "X-Egress-Denied"
WEBSOCKET_ECHO = "egress.websocket_echo"  # flow.metadata: the redactor of a WebSocket's upgrade


class Responses:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        if state is None or state.refused_here or flow.response is None:
            return
        response = flow.response
        if unasked_switch(
            response.status_code,
            flow.request.headers.get("upgrade"),
            response.headers.get("upgrade"),
        ):
            log.warning("%s: a protocol switch the request did not ask for dropped", state.host)
            mitm.kill(flow)  # mitmproxy would relay raw bytes both ways, unscanned (D526)
            return
        cleaned = False
        with self.shared.failclosed(Stage.RESPONSE):
            headers = flow.response.headers
            headers.pop(DENIED_HEADER, None)
            count = counter(state, "bytes_received")
            flow.response.stream = count
            if state.redactions:  # only what this request carried can be echoed back
                redactor = state.redactions
                redacted = redactor.fields(headers.fields)
                if redacted is not headers.fields:
                    headers.fields = redacted
                reason = flow.response.data.reason
                if reason and redactor.header(reason) != reason:  # the upstream's text too (D528)
                    flow.response.reason = status_codes.RESPONSES.get(flow.response.status_code, "")
                if encoded_answer(
                    headers.get("content-encoding"), headers.get("transfer-encoding")
                ):
                    # Asked for identity (proxy.outbound), compressed anyway: not scannable.
                    log.warning("%s: compressed answer to an injected request dropped", state.host)
                    mitm.kill(flow)
                    return
                flow.response.stream = _scrubbed(count, redactor.body())
                if flow.response.status_code == 101:  # its messages are scanned too (D525)
                    flow.metadata[WEBSOCKET_ECHO] = redactor
            turn = Turn.later(self.shared, flow, state)
            for adapter in ADAPTERS:  # a clause that reads answers (MCP's tools/list filter)
                flow.response.stream = adapter.answer(turn, flow.response.stream)
            cleaned = True
        if not cleaned:
            mitm.kill(flow)

    def response(self, flow: http.HTTPFlow) -> None:
        # Trailers are sent after this hook (HTTP/2; mitmproxy drops HTTP/1 ones).
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        trailers = flow.response.trailers if flow.response else None
        if state is not None and state.redactions and trailers:
            cleaned = False
            with self.shared.failclosed(Stage.RESPONSE):
                redactor = state.redactions
                trailers.fields = redactor.fields(trailers.fields)
                cleaned = True
            if not cleaned:
                mitm.kill(flow)
        self._finish(flow)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A server's message on a WebSocket whose upgrade carried an injected value has
        the value masked, as a body's echo is (D525): each message on its own, since
        applications read messages whole."""
        redactor: Redactor | None = flow.metadata.get(WEBSOCKET_ECHO)
        if redactor is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if message.from_client:
            return
        cleaned = False
        with self.shared.failclosed(Stage.RESPONSE):
            matcher = redactor.body()
            masked = matcher.feed(message.content) + matcher.feed(b"")
            if masked != message.content:
                message.content = masked
            cleaned = True
        if not cleaned:
            message.drop()  # type: ignore[no-untyped-call]
            mitm.kill(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow)

    def _finish(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.pop(FLOW_KEY, None)
        if state is None:
            return
        shared, request = self.shared, flow.request
        if state.parts:  # a clause settles what it owes and adds its audit fields
            turn = Turn.later(shared, flow, state)
            for adapter in ADAPTERS:
                with shared.failclosed(Stage.RESPONSE):
                    adapter.finish(turn)
        shared.metrics.duration.labels(state.decision.verdict).observe(
            time.monotonic() - state.started
        )
        upstream = address_text(flow.server_conn.peername) or shared.pinned(
            flow.client_conn, request.host, request.port
        )
        method = request.data.method.decode("utf-8", "surrogateescape")  # as sent (1.8)
        where = Where(
            flow.client_conn, method, request.scheme, state.host, request.port, upstream, state.path
        )
        status = flow.response.status_code if flow.response else None
        shared.write_audit(where, state.decision, state.started, status, state)


def _scrubbed(
    count: Callable[[bytes], bytes], scrub: BodyMatcher
) -> Callable[[bytes], Iterable[bytes] | bytes]:
    """Count what the upstream sent, forward it with the injected secrets masked."""
    return lambda chunk: scrub(count(chunk))
