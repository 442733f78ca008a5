"""The model API clause's metrics (issue 46): registered by `proxy.metrics.ProxyMetrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class LlmMetrics:
    """Model API calls metered (issue 46, docs/configuration.md#model-apis), by `api` and
    the matching `models` glob (the operator's bounded set, `*` without `models`), never
    the raw model string a sandbox chose."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.tokens = Counter(
            "egress_llm_tokens_total",
            "Model API tokens charged, by api, the matching models glob and direction "
            "(input or output).",
            ["api", "glob", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "egress_llm_cost_usd_total",
            "Model API cost charged in USD (from llm.prices), by api and models glob.",
            ["api", "glob"],
            registry=r,
        )
        self.estimated = Counter(
            "egress_llm_estimated_total",
            "Model API answers charged an estimate (cut off before their usage, or none "
            "reported), by api and models glob.",
            ["api", "glob"],
            registry=r,
        )

    def charged(
        self, api: str, glob: str, tokens: tuple[int, int], cost: int | None, estimated: bool
    ) -> None:
        """One answer's charge: (input, output) tokens, cost in nano-USD (None: unpriced)."""
        self.tokens.labels(api, glob, "input").inc(tokens[0])
        self.tokens.labels(api, glob, "output").inc(tokens[1])
        if cost is not None:
            self.cost.labels(api, glob).inc(cost / 1e9)
        if estimated:
            self.estimated.labels(api, glob).inc()
