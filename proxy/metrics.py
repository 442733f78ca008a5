"""The proxy's Prometheus metrics and the small HTTP server that exposes them.

Invariants:
* Every label value comes from a bounded set: `decision`, `reason` and `stage` from
  the closed enums of `proxy.decision`, `limit` from `proxy.limits.Limit`, `rule` from
  the operator's allowlist patterns, `result` from a fixed pair. Nothing the sandbox chooses (a host
  name, a path) ever becomes a label value.
* Each `ProxyMetrics` owns its registry, so tests build their own.
"""

from __future__ import annotations

import threading
import time
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

from proxy.decision import DECIDING, REPORTABLE, Reason, Stage
from proxy.limits import Limit

disable_created_metrics()  # `_created` series double the output and answer no operator question

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "egress_requests_total",
            "Egress decisions of every stage, summed, by verdict and reason code.",
            ["decision", "reason"],
            registry=r,
        )
        self.decisions = Counter(
            "egress_decisions_total",
            "Egress decisions by stage (connect, tls, request, tcp), verdict and reason code.",
            ["stage", "decision", "reason"],
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
            "Exceptions inside the policy addons, by stage; each one became a refusal.",
            ["stage"],
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
        self.reload_successful = Gauge(
            "egress_config_last_reload_successful",
            "Whether the last configuration load (start, SIGHUP or file change) succeeded.",
            registry=r,
            multiprocess_mode="min",
        )
        self.reload_success_time = Gauge(
            "egress_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load.",
            registry=r,
            multiprocess_mode="min",
        )
        self.allowlist_entries = Gauge(
            "egress_allowlist_entries",
            "Entries in the running allowlist.",
            registry=r,
            multiprocess_mode="max",
        )
        self.limit_refusals = Counter(
            "egress_limit_refusals_total",
            "Heads, messages and bodies refused for exceeding a memory bound, by bound.",
            ["limit"],
            registry=r,
        )
        for limit in Limit:
            self.limit_refusals.labels(limit.value)
        verdicts = [("allow" if r is Reason.ALLOWLISTED else "deny", r) for r in Reason]
        verdicts += [("would_deny", r) for r in REPORTABLE]
        for decision, reason in verdicts:
            self.requests.labels(decision, reason.value)
            for stage in DECIDING:
                self.decisions.labels(stage.value, decision, reason.value)
        for stage in Stage:
            self.policy_errors.labels(stage.value)
        for decision in ("allow", "deny", "would_deny"):
            self.duration.labels(decision)
        for result in ("ok", "failed"):
            self.config_reloads.labels(result)


# /healthz fails when the event loop has not stamped its heartbeat for this long.
STALL_S = 10.0


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            problem = self.server.problem()
            if problem is None:
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(503, problem.encode() + b"\n", "text/plain")
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
    """Serves `/metrics` and `/healthz` from a daemon thread.

    `/healthz` is 200 once `ready` is set, unless the proxy is draining (SIGTERM) or its
    event loop stopped stamping `heartbeat` (a wedged loop): then 503 with the cause.
    """

    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        self.registry = registry
        self.ready = threading.Event()
        self.draining = threading.Event()  # SIGTERM: no longer a place to send traffic
        self.heartbeat: float | None = None  # time.monotonic() of the loop's last stamp
        if ":" in address[0]:
            self.address_family = __import__("socket").AF_INET6
        super().__init__(address, _Handler)
        self._thread = threading.Thread(target=self.serve_forever, name="metrics", daemon=True)

    def problem(self) -> str | None:
        """Why the proxy is not healthy (the /healthz body), or None when it is."""
        if not self.ready.is_set():
            return "starting"
        if self.draining.is_set():
            return "draining"
        beat = self.heartbeat
        if beat is not None and time.monotonic() - beat > STALL_S:
            return "event loop stalled"
        return None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
