"""The one fail-closed wrapper of the egress addons.

mitmproxy logs an addon's exception and carries on with the flow, so a stage that
raised would let the flow through undecided. Every stage instead runs its decision and
the applying of it inside `failclosed(metrics, stage)`, having first set the refusing
answer, and assigns the real answer only as the block's last statement: an exception
leaves the refusal in place. The exception is logged with its traceback (never into a
response) and counted in `egress_policy_errors_total{stage}`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sandbox_egress.proxy.decision import Stage
from sandbox_egress.proxy.metrics import ProxyMetrics

log = logging.getLogger("egress")


@contextmanager
def failclosed(metrics: ProxyMetrics, stage: Stage) -> Iterator[None]:
    """Log, count and swallow an exception raised in the block (see module doc)."""
    try:
        yield
    except Exception:  # noqa: BLE001 - fail closed: the caller's refusal stands
        log.exception("policy error on %s", stage.value)
        metrics.policy_errors.labels(stage.value).inc()
