"""`egress-proxy usage --config FILE [--sandbox ID]`: each sandbox's model API spending
(issue 46) and what is left, read from the state backend the file names.

Spending is a token bucket per (sandbox, entry) and budget (`proxy.llm.spending`): what
was spent in the window is the budget less what is left (refilled since at the budget's
rate). Only a store outside the proxy can be read here: with `state.backend: redis` the
sandboxes are those the store holds; with the memory backend the spending lives inside the
running proxy, which has no admin API to ask yet, so `usage` says so and exits 2
(docs/decisions.md D466).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.llm.prices import dollars
from sandbox_egress.proxy.llm.spending import COST, rates
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import StateConfig

_WINDOWS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}


def line(sandbox: str, entry: str, budgets: Iterable[tuple[str, Rate, float]]) -> str:
    """One sandbox's spending on one entry: `(kind, rate, level)` per budget."""
    parts = [f"{sandbox}\t{entry}"]
    for kind, rate, level in budgets:
        spent, left = max(0.0, rate.amount - level), max(0.0, level)
        per = _WINDOWS.get(rate.window_s, f"{rate.window_s}s")
        if kind == COST:
            parts.append(
                f"cost {dollars(round(spent))} of {dollars(rate.amount)}/{per} "
                f"({dollars(round(left))} left)"
            )
        else:
            parts.append(f"tokens {round(spent)} of {rate.amount}/{per} ({round(left)} left)")
    return "\t".join(parts)


async def read(
    state: StateConfig, clauses: list[tuple[str, LlmClause]], sandbox: str | None
) -> list[str]:
    """The lines of every (sandbox, entry) with spending in a Redis store."""
    store = RedisState(state)
    try:
        lines = []
        for entry, clause in clauses:
            budgets = rates(clause)
            if not budgets:
                continue
            names: set[str] = set()
            for kind, _ in budgets:
                names.update(await store.sandboxes(entry, kind))
            for name in sorted(names):
                if sandbox is not None and name != sandbox:
                    continue
                levels = await store.levels(BudgetKey(name, entry), budgets)
                found = [(k, r, lv) for (k, r), lv in zip(budgets, levels, strict=True)]
                lines.append(line(name, entry, found))
        return lines
    finally:
        await store.close()


def refuse_memory() -> int:
    print(
        "egress-proxy: usage reads a shared state store (state.backend: redis); the memory "
        "backend keeps spending inside the running proxy (see egress_llm_tokens_total "
        "and egress_llm_cost_usd_total on its metrics address)",
        file=sys.stderr,
    )
    return 2
