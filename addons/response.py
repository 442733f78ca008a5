"""The response stage: clean what an upstream answers, then write the request's audit line.

Nothing is decided here: the request stage decided which secrets were injected, and
only those can be echoed back. `responseheaders` strips an upstream's `X-Egress-Denied`,
redacts the secrets in headers and streams the body (masking them in identity bodies,
D32; an injected request asked for identity, so a compressed answer to it is dropped,
D99); `response` redacts trailers; `response` and `error` write the audit line. What
could not be cleaned is never forwarded: the flow is killed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from mitmproxy import http

from sandbox_egress.addons import mitm
from sandbox_egress.addons.auditing import Where, address_text
from sandbox_egress.addons.clauses import ADAPTERS, Turn
from sandbox_egress.addons.shared import FLOW_KEY, FlowState, Shared, counter
from sandbox_egress.proxy.decision import Stage
from sandbox_egress.proxy.outbound import encoded_answer
from sandbox_egress.proxy.values.redact import BodyMatcher

log = logging.getLogger("egress")

DENIED_HEADER = "X-Egress-Denied"


class Responses:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        if state is None or state.refused_here or flow.response is None:
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
                if encoded_answer(headers.get("content-encoding")):
                    # Asked for identity (proxy.outbound), compressed anyway: not scannable.
                    log.warning("%s: compressed answer to an injected request dropped", state.host)
                    mitm.kill(flow)
                    return
                flow.response.stream = _scrubbed(count, redactor.body())
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

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow)

    def _finish(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.pop(FLOW_KEY, None)
        if state is None:
            return
        shared, request = self.shared, flow.request
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
