"""What the proxy counts about connections, beside its decisions (issue 14).

A mitmproxy addon that only observes: it never changes a flow, so it cannot weaken a
decision, and it runs after the policy addons in the chain.

* `egress_client_tls_failures_total`: a TLS handshake with a client failed
  (`tls_failed_client`), most often because the sandbox does not trust the CA;
* `egress_upstream_errors_total{kind}`: `connect` when a TCP connection to an upstream
  was attempted and failed (`server_connect_error` after a connect attempt; a
  connection the policy refused before connecting is not an upstream error), `tls`
  when the handshake with the upstream failed (`tls_failed_server`, a certificate that
  does not verify included);
* `egress_bytes_total{direction}`: payload bytes of raw TCP and WebSocket messages as
  they are relayed; the bodies of HTTP messages are counted from each audit record
  (`CountingAudit`), whose `bytes_sent`/`bytes_received` count the same bytes the
  proxy streamed (D72).

No label carries anything the sandbox chose: the label values are fixed in
`proxy.metrics`.
"""

from __future__ import annotations

from mitmproxy import http, tcp, tls
from mitmproxy.proxy import server_hooks

from sandbox_egress.proxy.audit.log import AuditRecord, AuditSink
from sandbox_egress.proxy.metrics import ProxyMetrics


class Telemetry:
    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics

    def tls_failed_client(self, data: tls.TlsData) -> None:
        self.metrics.client_tls_failures.inc()

    def tls_failed_server(self, data: tls.TlsData) -> None:
        self.metrics.upstream_errors.labels("tls").inc()

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        # mitmproxy stamps timestamp_start just before it opens the socket; a connection
        # an addon killed in `server_connect` (no decision, a refused pin) never has one.
        if data.server.timestamp_start is not None:
            self.metrics.upstream_errors.labels("connect").inc()

    def tcp_message(self, flow: tcp.TCPFlow) -> None:
        message = flow.messages[-1]
        self._count(message.from_client, len(message.content))

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is not None and flow.websocket.messages:
            message = flow.websocket.messages[-1]
            self._count(message.from_client, len(message.content))

    def _count(self, from_client: bool, size: int) -> None:
        m = self.metrics
        (m.bytes_upstream if from_client else m.bytes_downstream).inc(size)


class CountingAudit:
    """An audit sink that adds each record's body bytes to `egress_bytes_total`, then
    passes the record on unchanged."""

    def __init__(self, sink: AuditSink, metrics: ProxyMetrics) -> None:
        self._sink = sink
        self._metrics = metrics

    def write(self, record: AuditRecord) -> None:
        if record.bytes_sent:
            self._metrics.bytes_upstream.inc(record.bytes_sent)
        if record.bytes_received:
            self._metrics.bytes_downstream.inc(record.bytes_received)
        self._sink.write(record)
