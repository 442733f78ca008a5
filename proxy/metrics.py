"""The proxy's Prometheus metrics and the small HTTP server that exposes them.

Invariants:
* Every label value comes from a bounded set: `decision` and `reason` from the
  closed enums of `proxy.decision`, `rule` from the operator's allowlist
  patterns, `result` from a fixed pair. Nothing the sandbox chooses (a host
  name, a path) ever becomes a label value.
* Each `ProxyMetrics` owns its registry, so tests build their own.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from proxy.decision import Reason

disable_created_metrics()  # `_created` series double the output and answer no operator question

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "egress_requests_total",
            "Egress decisions (CONNECTs and requests), by verdict and reason code.",
            ["decision", "reason"],
            registry=r,
        )
        self.injections = Counter(
            "egress_injections_total",
            "Requests into which transform headers were written, by deciding allowlist entry.",
            ["rule"],
            registry=r,
        )
        self.duration = Histogram(
            "egress_request_duration_seconds",
            "Time from request headers to the end of the response, by verdict.",
            ["decision"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        # multiprocess_mode: how the parent of `--workers N` combines its workers' values.
        self.active_connections = Gauge(
            "egress_active_connections",
            "Client connections currently open.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.policy_errors = Counter(
            "egress_policy_errors_total",
            "Exceptions inside the policy addon; each one became a refusal.",
            registry=r,
        )
        self.audit_dropped = Counter(
            "egress_audit_lines_dropped_total",
            "Audit lines dropped because the audit writer fell a whole queue behind.",
            registry=r,
        )
        self.config_reloads = Counter(
            "egress_config_reloads_total",
            "Configuration reloads, by result (ok, failed).",
            ["result"],
            registry=r,
        )
        self.allowlist_entries = Gauge(
            "egress_allowlist_entries",
            "Entries in the running allowlist.",
            registry=r,
            multiprocess_mode="max",
        )
        for reason in Reason:
            decision = "allow" if reason is Reason.ALLOWLISTED else "deny"
            self.requests.labels(decision, reason.value)
        for decision in ("allow", "deny"):
            self.duration.labels(decision)
        for result in ("ok", "failed"):
            self.config_reloads.labels(result)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            if self.server.ready.is_set():
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(503, b"starting\n", "text/plain")
        else:
            self._reply(404, b"not found\n", "text/plain")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # scrapes are not news


class MetricsServer(ThreadingHTTPServer):
    """Serves `/metrics` and `/healthz` (200 once `ready` is set) from a daemon thread."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.registry = registry
        self.ready = threading.Event()
        if ":" in address[0]:
            self.address_family = __import__("socket").AF_INET6
        super().__init__(address, _Handler)
        self._thread = threading.Thread(target=self.serve_forever, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
