"""An upstream that fails its TLS handshake gets the project's refusal, not mitmproxy's page.

mitmproxy answers a failed upstream connection with an HTML 502 (or an HTTP/2 reset)
and the audit line said `allow`. Here (issue 21, D101):

* `UpstreamFailures.tls_failed_server` notes the handshake that failed on a client's
  upstream connection; `error` — mitmproxy's error hook, which runs next and before it
  answers — takes that note for the request whose connection it was, logs it with the
  host, and turns the request's decision into `upstream_tls` (so the audit line says
  `deny`, `upstream_tls`, 502), keeping the refusal to send on the flow;
* `HttpStream.handle_protocol_error` is wrapped so that the error it was about to send
  the client is replaced by that refusal: `X-Egress-Denied: upstream_tls`, the JSON
  body, status 502, on HTTP/1 and HTTP/2 alike. Any other failure is left as it was.

Added before `EgressPolicy`, whose `error` hook writes the audit line.
"""

from __future__ import annotations

import logging

from mitmproxy import connection, http, tls
from mitmproxy.proxy import commands, layer
from mitmproxy.proxy.layers.http import HttpStream, SendHttp
from mitmproxy.proxy.layers.http._events import (
    RequestProtocolError,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)

from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FLOW_KEY, FlowState
from sandbox_egress.addons.workarounds import Commands, relay
from sandbox_egress.proxy.decision import Decision, Reason

log = logging.getLogger("egress")

REFUSAL_KEY = "egress.upstream_refusal"  # flow.metadata: the response to send instead

_original = HttpStream.handle_protocol_error


def install() -> None:
    HttpStream.handle_protocol_error = _readable  # type: ignore[method-assign]


def _readable(self: HttpStream, event: ResponseProtocolError | RequestProtocolError) -> Commands:
    def instead(command: commands.Command) -> Commands | None:
        refusal = self.flow.metadata.get(REFUSAL_KEY)
        if isinstance(command, SendHttp) and command.event is event and refusal is not None:
            return _send(self, refusal)
        return None

    yield from relay(_original(self, event), instead)


def _send(stream: HttpStream, response: http.Response) -> layer.CommandGenerator[None]:
    client = stream.context.client
    yield SendHttp(ResponseHeaders(stream.stream_id, response, False), client)
    if response.raw_content:
        yield SendHttp(ResponseData(stream.stream_id, response.raw_content), client)
    yield SendHttp(ResponseEndOfMessage(stream.stream_id), client)


class UpstreamFailures:
    def __init__(self) -> None:
        # client connection id -> why its last upstream handshake failed, until the
        # request it was opened for fails (mitmproxy calls the two hooks in turn).
        self._failed: dict[str, str] = {}

    def load(self, _loader: object) -> None:
        install()

    def tls_failed_server(self, data: tls.TlsData) -> None:
        self._failed[data.context.client.id] = data.conn.error or "handshake failed"

    def client_disconnected(self, client: connection.Client) -> None:
        self._failed.pop(client.id, None)

    def error(self, flow: http.HTTPFlow) -> None:
        why = self._failed.pop(flow.client_conn.id, None)
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        if why is None or state is None or flow.response is not None:
            return
        if not state.decision.allowed:
            return
        log.warning(
            "upstream %s:%s: TLS handshake failed (%s); refused as upstream_tls",
            state.host,
            flow.request.port,
            why,
        )
        state.decision = Decision.deny(Reason.UPSTREAM_TLS, state.decision.entry)
        refusal = refusal_response(state.decision, state.host, flow.request.method)
        flow.metadata[REFUSAL_KEY] = flow.response = refusal  # the audit line's status
