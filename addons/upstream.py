"""An upstream that fails gets the product's own answer, never mitmproxy's page (D101 for
TLS, D352-D354 for the rest).

mitmproxy answers a failed upstream exchange with an HTML 502 (`Server: mitmproxy`, the
error's text) or an HTTP/2 page of the same, and the audit line said `allow`,
`status: null`. Here:

* `HttpStream.handle_protocol_error` is wrapped: an upstream failure before any answer
  (a `ResponseProtocolError` on a flow without a response) is named first
  (`proxy.failures.classify`: `upstream_refused`, `upstream_reset`, `upstream_timeout`)
  and noted on the flow, then mitmproxy handles it; the error it was about to send the
  client is replaced by the product's JSON answer (`addons.refusal`) — the refusal the
  `error` hook set, or one made from the failure's reason — on HTTP/1 and HTTP/2 alike;
* one failure is repaired instead (D680): a safe request without a body that a kept-alive
  connection lost before any answer byte goes once more, on a new connection
  (`proxy.failures.send_again` decides; `_send_again` sends it as mitmproxy does); kept
  alive: an answer head came on it before (`UpstreamFailures.responseheaders`, D683); and
  so does any request held whole that an HTTP/2 upstream did not process (its GOAWAY or
  `REFUSED_STREAM`, runtime/engine/goaway.py, D701);
* `UpstreamFailures.tls_failed_server` notes the handshake that failed on a client's
  upstream connection (TLS wins over the connect error that follows it);
* `UpstreamFailures.error` — mitmproxy's error hook, which runs before it answers —
  turns the allowed request's decision into a `deny` with that reason (so the audit
  line names it, with the status 502/504), sets the answer on the flow, counts it in
  `egress_upstream_failures_total{reason}` and says it on stderr (`proxy.failures.Quieted`:
  one line per host and reason per 10 s);
* mitmproxy's pages for requests it refuses itself, before any hook, are replaced too
  (`addons.pages`); the upstream deadlines are its sub-addon (`addons.timeouts`).

Added before `EgressPolicy`, whose `error` hook writes the audit line.
"""

from __future__ import annotations

import logging
import time
import weakref

from mitmproxy import connection, http, tls
from mitmproxy.proxy import commands, layer
from mitmproxy.proxy.layers.http import HttpStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    RequestProtocolError,
    RequestTrailers,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)

from sandbox_egress.addons import pages
from sandbox_egress.addons.layers.workarounds import Commands, relay
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FLOW_KEY, FlowState
from sandbox_egress.addons.timeouts import CONNECT_TIMEOUT_S, TIMED_OUT_KEY, Timeouts
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.failures import (
    SENT_AGAIN_CAUSES,
    Quieted,
    again_cause,
    classify,
    send_again,
)
from sandbox_egress.proxy.metrics import ProxyMetrics

log = logging.getLogger("egress")

REFUSAL_KEY = "egress.upstream_refusal"  # flow.metadata: the response to send instead
FAILED_KEY = "egress.upstream_failed"  # flow.metadata: the failure's Reason, before `error`
AGAIN_KEY = "egress.sent_again"  # flow.metadata: the request went on a second connection

# Upstream connections an answer head came on (`UpstreamFailures.responseheaders`): only a
# request lost on one of these is the kept-alive race (D683). Weak: a closed connection
# leaves with its last flow.
_answered: weakref.WeakSet[connection.Server] = weakref.WeakSet()

_original = HttpStream.handle_protocol_error


def install() -> None:
    HttpStream.handle_protocol_error = _readable  # type: ignore[method-assign]
    pages.install()  # mitmproxy's pages before any hook (a request it refuses itself)


def _readable(self: HttpStream, event: ResponseProtocolError | RequestProtocolError) -> Commands:
    flow = self.flow
    if isinstance(event, ResponseProtocolError) and _lost_with_its_connection(self, event):
        yield from _send_again(self, again_cause(event.message))
        return
    if isinstance(event, ResponseProtocolError) and flow.response is None:
        timed_out = bool(flow.metadata.get(TIMED_OUT_KEY))
        flow.metadata.setdefault(FAILED_KEY, classify(event.code.name, event.message, timed_out))

    def instead(command: commands.Command) -> Commands | None:
        if not (isinstance(command, SendHttp) and command.event is event):
            return None
        if command.connection is not self.context.client:
            return None
        refusal = flow.metadata.get(REFUSAL_KEY)
        if refusal is None and isinstance(event, ResponseProtocolError):
            refusal = _fallback(flow, event)
        return _send(self, refusal) if refusal is not None else None

    yield from relay(_original(self, event), instead)


def _lost_with_its_connection(stream: HttpStream, event: ResponseProtocolError) -> bool:
    """Whether the request was lost with a kept-alive connection and goes once more (D680):
    the rule first, then that the stream has sent it all and waits for the answer head.
    Kept alive: the connection answered a request before (D683); one opened before this
    request came but never used (the upstream first, D19) is not enough."""
    flow = stream.flow
    return (
        flow.response is None
        and send_again(
            # As sent: mitmproxy's `method` is upper-cased, and `get` is not `GET` (D681).
            flow.request.data.method.decode("latin-1"),
            event.message,
            reused=flow.server_conn in _answered,
            held=_bodiless(flow.request),
            again=bool(flow.metadata.get(AGAIN_KEY)),
            timed_out=bool(flow.metadata.get(TIMED_OUT_KEY)),
            names=flow.request.headers.keys(),
            # Held whole as it went out (a streamed body is not kept, D701).
            whole=flow.request.raw_content is not None,
        )
        and stream.client_state == stream.state_done
        and stream.server_state == stream.state_wait_for_response_headers
    )


def _bodiless(request: http.Request) -> bool:
    """A request without a body (nothing of it is lost, and nothing is sent twice): an
    HTTP/1 one whose head frames none; or one held whole (not streamed) that has none.
    A held body (a SigV4 request's, a model API call's) is a body too (D687)."""
    headers = request.headers
    if not request.stream:
        return not (request.raw_content or request.trailers)
    return (
        request.http_version.startswith("HTTP/1")
        and "transfer-encoding" not in headers
        and headers.get("content-length", "0").strip() == "0"
    )


def _send_again(stream: HttpStream, cause: str) -> layer.CommandGenerator[None]:
    """The held request once more, on a new connection (the connect-time checks run
    again; a connect that fails is answered as any failed connect), unless the client
    cancelled it while that connection opened."""
    stream.flow.metadata[AGAIN_KEY] = cause  # counted as it ends (`UpstreamFailures`)
    if not (yield from stream.make_server_connection()):
        return
    # The client may have reset its stream (or gone) while the connection opened: its
    # error waits in the stream's queue; then nothing is sent (mitmproxy's own check after
    # a hook, D712), and its error hook writes the audit line.
    if (yield from stream.check_killed(True)):
        return
    request, server = stream.flow.request, stream.context.server
    content = request.raw_content
    done = not (content or request.trailers)
    yield SendHttp(RequestHeaders(stream.stream_id, request, done), server)
    if content:
        yield SendHttp(RequestData(stream.stream_id, content), server)
    if request.trailers:
        yield SendHttp(RequestTrailers(stream.stream_id, request.trailers), server)
    yield SendHttp(RequestEndOfMessage(stream.stream_id), server)


def _fallback(flow: http.HTTPFlow, event: ResponseProtocolError) -> http.Response | None:
    """The product's answer where mitmproxy would send its page and no hook set one."""
    if event.code.http_status_code() is None or flow.response is not None:
        return None  # a reset or a close: no page to replace
    reason = flow.metadata.get(FAILED_KEY)
    if not isinstance(reason, Reason):
        reason = Reason.UPSTREAM_RESET
    state: FlowState | None = flow.metadata.get(FLOW_KEY)
    host = state.host if state is not None else flow.request.host
    return refusal_response(Decision.deny(reason), host, flow.request.method)


def _send(stream: HttpStream, response: http.Response) -> layer.CommandGenerator[None]:
    client = stream.context.client
    yield SendHttp(ResponseHeaders(stream.stream_id, response, False), client)
    if response.raw_content:
        yield SendHttp(ResponseData(stream.stream_id, response.raw_content), client)
    yield SendHttp(ResponseEndOfMessage(stream.stream_id), client)


class UpstreamFailures:
    def __init__(
        self,
        metrics: ProxyMetrics | None = None,
        connect_s: float = CONNECT_TIMEOUT_S,
        answer_s: float = 0.0,
    ) -> None:
        self.metrics = metrics
        self.addons = [Timeouts(connect_s, answer_s)]  # the deadlines (`addons.timeouts`)
        # client connection id -> why its last upstream handshake failed, until the
        # request it was opened for fails (mitmproxy calls the two hooks in turn).
        self._failed: dict[str, str] = {}
        self._quiet = Quieted()

    def load(self, _loader: object) -> None:
        install()

    def tls_failed_server(self, data: tls.TlsData) -> None:
        self._failed[data.context.client.id] = data.conn.error or "handshake failed"

    def client_disconnected(self, client: connection.Client) -> None:
        self._failed.pop(client.id, None)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """An answer head came from the upstream on this connection (D683). mitmproxy runs
        this hook for an answer the proxy set itself too: a refusal is not one."""
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        if state is not None and state.decision.allowed and not state.refused_here:
            _answered.add(flow.server_conn)
            self._count_again(flow, "answered")

    def error(self, flow: http.HTTPFlow) -> None:
        tls_failure = self._failed.pop(flow.client_conn.id, None)
        if flow.response is None:  # after an answer head it was counted answered
            self._count_again(flow, "failed")
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        if state is None or flow.response is not None or not state.decision.allowed:
            return
        failed = flow.metadata.get(FAILED_KEY)
        reason = Reason.UPSTREAM_TLS if tls_failure is not None else failed
        if not isinstance(reason, Reason):
            return  # the client's side failed: there is no one to answer
        state.decision = Decision.deny(reason, state.decision.entry)
        refusal = refusal_response(state.decision, state.host, flow.request.method)
        flow.metadata[REFUSAL_KEY] = flow.response = refusal  # the audit line's status
        if self.metrics is not None:
            self.metrics.upstream_failures.labels(reason.value).inc()
        # The engine's words up to its first colon: what follows can quote the upstream's
        # bytes (`unexpected server response: b'...'`), which may echo a secret.
        why = tls_failure or (flow.error.msg if flow.error else "").partition(":")[0]
        self._say(state.host, flow.request.port, reason, refusal.status_code, why)

    def _count_again(self, flow: http.HTTPFlow, outcome: str) -> None:
        """A request sent once more (D680, D701) ended: answered, or failed again (its
        failure is counted as any, in `upstream_failures`)."""
        cause = flow.metadata.get(AGAIN_KEY)
        if cause in SENT_AGAIN_CAUSES and self.metrics is not None:
            self.metrics.upstream_sent_again.labels(cause, outcome).inc()

    def _say(self, host: str, port: int, reason: Reason, status: int, why: str) -> None:
        unsaid = self._quiet.say(host, reason, time.monotonic())
        if unsaid is None:
            return
        more = f" ({unsaid} more since the last line)" if unsaid else ""
        log.warning(
            "upstream %s:%s failed: %s; answered %d %s%s",
            host,
            port,
            why[:200] or "no detail",
            status,
            reason.value,
            more,
        )
