"""The approvals' metrics (issue 47): registered by `proxy.metrics.ProxyMetrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# What happened to held destinations (docs/configuration.md#approvals): an approval opened
# (`held`), answered (`allowed`, `denied`), lapsed (`timed_out`), refused at the bound
# (`limited`); a request admitted by a grant (`granted`); an approver that gave no answer.
APPROVAL_EVENTS = ("held", "allowed", "denied", "timed_out", "limited", "granted", "no_answer")


class ApprovalMetrics:
    """Approvals (1.18). No label names a host, a sandbox or an approval id."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.events = Counter(
            "egress_approvals_total",
            "Approval events: held, allowed, denied, timed_out, limited, granted "
            "(a request admitted by a grant), no_answer (an approver that gave none).",
            ["event"],
            registry=r,
        )
        self.pending = Gauge(
            "egress_approvals_pending",
            "Approvals open now (waiting for an answer).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.held_seconds = Histogram(
            "egress_approval_hold_seconds",
            "How long held requests waited for their approval's answer.",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
        )
        for event in APPROVAL_EVENTS:
            self.events.labels(event)
