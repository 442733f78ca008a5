"""`egress-proxy usage --config FILE [--sandbox ID] [--metrics HOST:PORT]
[--admin-token-file FILE]`: each sandbox's model API spending (issue 46) and what is
left, read from the state backend the file names.

Spending is a token bucket per (sandbox, entry) and budget (`proxy.llm.spending`): what
was spent in the window is the budget less what is left (refilled since at the budget's
rate). With `state.backend: redis` the store is read here (`read`): the sandboxes are
those it holds. With the memory backend the spending lives inside the running proxy, so
`ask` reads it from the proxy's admin API (`GET /usage` on its metrics address, with the
token `run --admin-token-file` read; `runtime.usageapi`, D570, replacing D466's refusal):
the lines are the same (`line`), laid out from the proxy's own levels and rates.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from urllib.parse import urlencode

from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.llm import ledger
from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.llm.prices import dollars
from sandbox_egress.proxy.llm.spending import COST, rates
from sandbox_egress.proxy.state.redis import RedisState
from sandbox_egress.proxy.state.settings import StateConfig
from sandbox_egress.runtime import approvalscli

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


def ask(host: str, port: int, token: str, sandbox: str | None) -> tuple[int, list[str]]:
    """The running proxy's lines (exit 0), or exit 1 with why it could not say."""
    target = ledger.PATH if sandbox is None else f"{ledger.PATH}?{urlencode({'sandbox': sandbox})}"
    status, document = approvalscli.call(host, port, token, "GET", target)
    if status != 200:
        return 1, [f"egress-proxy: usage: {status} {document.get('error', '')}".rstrip()]
    try:
        found = lines(document)
    except ValueError as exc:
        return 1, [f"egress-proxy: usage: the proxy's answer: {exc}"]
    if document.get("truncated") is True:
        print(f"egress-proxy: usage: the first {len(found)} only (--sandbox ID for one)",
              file=sys.stderr)  # fmt: skip
    return 0, found


def lines(document: object) -> list[str]:
    """The lines of the admin API's answer (ValueError: not a usage document)."""
    return [line(name, entry, budgets) for name, entry, budgets in ledger.rows(document)]
