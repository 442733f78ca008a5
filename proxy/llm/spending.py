"""Whose spending a model API call is, and what it charges (issue 46).

Spending is kept in the state backend (`proxy.state`: memory, the node of `--workers N`,
Redis) under `BudgetKey(spender, entry pattern)` with the kinds `llm_tokens` and
`llm_cost`, beside (never mixed with) the entry's `budget:` kinds. The spender is the
sandbox id, or `client-ADDRESS` when the proxy serves no sandboxes (per client).

A call is admitted while every budget of its clause has a whole unit left
(`StateBackend.admit_spending`); once its answer is done, `charges` says what it spent.
"""

from __future__ import annotations

from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.llm.config import Allowance, LlmClause

TOKENS = "llm_tokens"
COST = "llm_cost"


def spender(sandbox: str | None, client: str) -> str:
    return sandbox if sandbox else f"client-{client}"


def key_of(sandbox: str | None, client: str, entry: str) -> BudgetKey:
    return BudgetKey(spender(sandbox, client), entry)


def rate(allowance: Allowance) -> Rate:
    return Rate(allowance.amount, allowance.window_s)


def rates(clause: LlmClause) -> tuple[tuple[str, Rate], ...]:
    found = [(TOKENS, clause.tokens), (COST, clause.cost)]
    return tuple((kind, rate(given)) for kind, given in found if given is not None)


def charges(clause: LlmClause, tokens: int, cost: int | None) -> tuple[tuple[str, Rate, int], ...]:
    """What one call spent of each budget: input + output tokens, cost in nano-USD."""
    found: list[tuple[str, Rate, int]] = []
    if clause.tokens is not None and tokens > 0:
        found.append((TOKENS, rate(clause.tokens), tokens))
    if clause.cost is not None and cost:
        found.append((COST, rate(clause.cost), cost))
    return tuple(found)
