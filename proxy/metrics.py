"""The proxy's Prometheus metrics (served by `common.serve.MetricsServer`).

Invariants:
* Every label value comes from a bounded set: `decision`, `reason` and `stage` from
  the closed enums of `proxy.decision`, `limit` from `proxy.limits.Limit`, `bound` from
  `proxy.fairness.Bound`, `rule` from
  the operator's allowlist patterns, `result` from a fixed pair. Nothing the sandbox chooses (a host
  name, a path) ever becomes a label value.
* Each `ProxyMetrics` owns its registry, so tests build their own.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from sandbox_egress.common.serve import add_build_info
from sandbox_egress.proxy.approvals.metrics import ApprovalMetrics
from sandbox_egress.proxy.decision import DECIDING, REPORTABLE, Reason, Stage
from sandbox_egress.proxy.failures import SENT_AGAIN_CAUSES, SENT_AGAIN_OUTCOMES
from sandbox_egress.proxy.fairness import Bound
from sandbox_egress.proxy.limits import Limit
from sandbox_egress.proxy.llm.metrics import LlmMetrics

# `_created` series double the output and answer no operator question.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client: unannotated

DIRECTIONS = ("upstream", "downstream")
DNS_RESULTS = ("ok", "failed", "timeout")
UPSTREAM_ERRORS = ("connect", "tls")
# An allowed request's upstream failed before its answer (addons/upstream.py, D352).
UPSTREAM_FAILURES = (
    Reason.UPSTREAM_REFUSED,
    Reason.UPSTREAM_RESET,
    Reason.UPSTREAM_TIMEOUT,
    Reason.UPSTREAM_TLS,
)
BOUND_OUTCOMES = ("waited", "refused")
_DNS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
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
        # Budgets (docs/configuration.md#budgets), by the deciding entry's pattern: bounded
        # by the operator's configuration, never by the sandbox.
        self.budget_remaining = Gauge(
            "egress_budget_remaining",
            "What is left of an entry's budget now: requests, or upload bytes.",
            ["rule", "budget"],
            registry=r,
            multiprocess_mode="min",
        )
        self.budget_exceeded = Counter(
            "egress_budget_exceeded_total",
            "Requests refused, and uploads cut, for exceeding an entry's budget.",
            ["rule", "budget"],
            registry=r,
        )
        # The shared budget state (issue 34, docs/configuration.md#state): decisions the
        # store did not answer, by backend and what `on_error` made of them.
        self.audit_sink_dropped = Counter(
            "egress_audit_dropped_total",
            "Audit records an export sink dropped (collector down or slow, queue full), by sink.",
            ["sink"],
            registry=r,
        )
        self.audit_sink_dropped.labels("otlp")
        self.state_unavailable = Counter(
            "egress_state_unavailable_total",
            "Budget decisions the shared state did not answer in time, by backend and "
            "outcome: local (decided in this process's memory) or deny (refused, 503).",
            ["backend", "outcome"],
            registry=r,
        )
        self.bound_hits = Counter(
            "egress_bound_hits_total",
            "Times a fair-share bound bit (docs/configuration.md#fair-sharing), by bound and "
            "outcome: waited (served in turn) or refused (failed at once, or accepting paused).",
            ["bound", "outcome"],
            registry=r,
        )
        for bound in Bound:
            for outcome in BOUND_OUTCOMES:
                self.bound_hits.labels(bound.value, outcome)
        # issue 32: credential fetches, by credential name (bounded by the configuration,
        # never by the sandbox) and outcome (proxy.credentials.cache.Outcome).
        self.credential_fetches = Counter(
            "egress_credential_fetches_total",
            "Fetches and mints of configured credentials, by credential and outcome "
            "(ok, failed, timeout, invalid).",
            ["credential", "outcome"],
            registry=r,
        )
        self.credential_stale = Counter(
            "egress_credential_stale_served_total",
            "Requests given a credential's last value past its freshness, because its "
            "refresh failed (within max_stale), by credential.",
            ["credential"],
            registry=r,
        )
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
        self._operator_metrics(r)
        self.sandboxes = SandboxMetrics(r)
        self.approvals = ApprovalMetrics(r)

        self.llm = LlmMetrics(r)
        self._decided: dict[tuple[Stage, str, Reason], tuple[Counter, Counter]] = {}
        # issue 33: MCP messages by method (an entry's configured methods, "response",
        # "other": a bounded set) and their POST's reason; never by tool.
        self.mcp_messages = Counter(
            "egress_mcp_messages_total",
            "MCP messages judged at an endpoint, by method (configured, response or other) "
            "and the reason code of their POST's decision.",
            ["method", "reason"],
            registry=r,
        )

    def count_mcp(self, method: str, reason: Reason | None) -> None:
        """One MCP message; `reason` None: its POST was admitted."""
        self.mcp_messages.labels(method, (reason or Reason.ALLOWLISTED).value).inc()

    def state_unavailable_inc(self, backend: str, outcome: str) -> None:
        self.state_unavailable.labels(backend, outcome).inc()

    def budgets_configured(self, budgets: Iterable[tuple[str, str, int]], kept: bool) -> None:
        """(entry pattern, "requests"/"upload", amount) of every budget in the running
        configuration: their series exist from the start, full until the next request.
        `kept`: this process holds the budgets (the memory backend). Budgets kept in a
        store (Redis, the node of `--workers N`) have no `egress_budget_remaining`: a
        replica's own figure would read full while the fleet's budget is spent (D400)."""
        for rule, kind, amount in budgets:
            self.budget_exceeded.labels(rule, kind)
            if kept:
                self.budget_remaining.labels(rule, kind).set(amount)

    def count_decision(self, stage: Stage, verdict: str, reason: Reason) -> None:
        """One decision, in `egress_decisions_total` by stage and in `egress_requests_total`
        (the sum over stages, D63). The series are looked up once per label set: keys
        come from the closed `Stage`/verdict/`Reason` sets."""
        series = self._decided.get((stage, verdict, reason))
        if series is None:
            series = (
                self.requests.labels(verdict, reason.value),
                self.decisions.labels(stage.value, verdict, reason.value),
            )
            self._decided[(stage, verdict, reason)] = series
        series[0].inc()
        series[1].inc()

    def _operator_metrics(self, r: CollectorRegistry) -> None:
        """What an operator looks at first (issue 14): build, process, bytes, DNS, TLS.

        Fed by addons/telemetry.py and the resolver wrapper of proxy/resolver.py. Labels
        only from `DIRECTIONS`, `DNS_RESULTS` and `UPSTREAM_ERRORS`, created at zero;
        never a host name.
        """
        self.build_info = add_build_info(r, "egress")
        self.bytes = Counter(
            "egress_bytes_total",
            "Payload bytes relayed, by direction: upstream (sandbox to server) or downstream.",
            ["direction"],
            registry=r,
        )
        # The two series, looked up once: they are counted per message and per record.
        self.bytes_upstream, self.bytes_downstream = (self.bytes.labels(d) for d in DIRECTIONS)
        self.dns_lookups = Counter(
            "egress_dns_lookups_total",
            "Name lookups the proxy made (cache misses), by result (ok, failed, timeout).",
            ["result"],
            registry=r,
        )
        self.dns_lookup_seconds = Histogram(
            "egress_dns_lookup_seconds",
            "Time one name lookup of the proxy took, whatever its result.",
            buckets=_DNS_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(
            "egress_upstream_errors_total",
            "Upstream connections that failed, by kind: connect (TCP) or tls (handshake).",
            ["kind"],
            registry=r,
        )
        self.client_tls_failures = Counter(
            "egress_client_tls_failures_total",
            "TLS handshakes with a client that failed (often: the sandbox does not trust the CA).",
            registry=r,
        )
        self.upstream_failures = Counter(
            "egress_upstream_failures_total",
            "Allowed requests answered with the proxy's egress_failed because their upstream "
            "failed before answering, by reason (upstream_refused, upstream_reset, "
            "upstream_timeout, upstream_tls).",
            ["reason"],
            registry=r,
        )
        for reason in UPSTREAM_FAILURES:
            self.upstream_failures.labels(reason.value)
        self.upstream_sent_again = Counter(
            "egress_upstream_sent_again_total",
            "Requests the proxy sent once more on a new upstream connection or stream, by "
            "cause (closed: a kept-alive connection lost it; unprocessed: an HTTP/2 "
            "upstream's GOAWAY or REFUSED_STREAM) and outcome (answered, failed).",
            ["cause", "outcome"],
            registry=r,
        )
        for cause in SENT_AGAIN_CAUSES:
            for outcome in SENT_AGAIN_OUTCOMES:
                self.upstream_sent_again.labels(cause, outcome)
        for result in DNS_RESULTS:
            self.dns_lookups.labels(result)
        for kind in UPSTREAM_ERRORS:
            self.upstream_errors.labels(kind)


IDENTIFICATIONS = ("identified", "auth_required", "unknown_sandbox", "connection_limit")


class SandboxMetrics:
    """A node proxy's sandboxes (1.12). The one sandbox label is `sandbox_class`, from the
    operator's files; a sandbox id is never a label value."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.loaded = Gauge(
            "egress_sandboxes", "Sandboxes whose policy is loaded.", registry=r,
            multiprocess_mode="max",
        )  # fmt: skip
        self.invalid = Gauge(
            "egress_sandbox_files_invalid",
            "Sandbox files refused by the last scan: each keeps its last good policy, if any.",
            registry=r,
            multiprocess_mode="max",
        )
        self.loads = Counter(
            "egress_sandbox_file_loads_total",
            "Sandbox files read after a change, by result (ok, failed).",
            ["result"],
            registry=r,
        )
        self.identifications = Counter(
            "egress_sandbox_identifications_total",
            "Client connections tied to a sandbox, or refused, by result.",
            ["result"],
            registry=r,
        )
        self.connections = Gauge(
            "egress_sandbox_connections",
            "Client connections open per sandbox class.",
            ["sandbox_class"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.connection_refusals = Counter(
            "egress_sandbox_connection_refusals_total",
            "Connections refused because their sandbox was at its connection bound, by class.",
            ["sandbox_class"],
            registry=r,
        )
        for result in ("ok", "failed"):
            self.loads.labels(result)
        for result in IDENTIFICATIONS:
            self.identifications.labels(result)
