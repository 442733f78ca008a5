"""What a call cost: tokens each way times the first matching price (USD per million
tokens), in nano-USD, rounded up to a whole nano-dollar so a charge is never zero by
rounding. A model no price glob matches has no cost (None); a cost budget refuses it
before it is sent (`llm_model_unpriced`), so only an unbudgeted clause meets None here.
"""

from __future__ import annotations

import math

from sandbox_egress.proxy.llm.config import NANO, LlmClause

NANO_PER_MICRO = NANO // 1_000_000  # a price per million tokens is micro-USD per token


def cost_of(clause: LlmClause, model: str, input_tokens: int, output_tokens: int) -> int | None:
    price = clause.price_of(model)
    if price is None:
        return None
    micro = input_tokens * price.input + output_tokens * price.output
    return math.ceil(round(micro * NANO_PER_MICRO, 6))


def dollars(nano: int) -> str:
    """A nano-USD amount for people: `0.000125 USD`."""
    return f"{nano / NANO:.6f} USD"
