"""Each spender's model API spending as a JSON document: what the admin API's `GET /usage`
answers and `egress-proxy usage` prints (issue 46, docs/decisions.md D570).

`report` reads one process's memory (`proxy.clauses.budget.Budgets`: the single proxy's
`MemoryState`, or the node's that the parent of `--workers N` holds) at one instant:

    {"usage": [{"sandbox": "sb-a", "entry": "api.openai.com",
                "budgets": [{"kind": "llm_tokens", "amount": 1000, "window_s": 86400,
                             "level": 890.0}]}]}

`level` is what is left (below zero when overspent), as the Redis path reads it
(`StateBackend.levels`); `amount`/`window_s` are the budget's rate. At most `MAX_ROWS`
rows are said (then `"truncated": true`: ask for one sandbox). `rows` reads such a
document back, refusing anything not of that shape (ValueError). `sandbox_of` reads the
one query parameter, `sandbox`. Pure: no I/O, the clock is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs

from sandbox_egress.proxy.clauses.budget import BudgetKey, Budgets, Rate
from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.llm.spending import COST, TOKENS, rates

PATH = "/usage"
MAX_SANDBOX = 256
MAX_ROWS = 10_000  # ~2 MiB of JSON, well under what the CLI reads (4 MiB), D573

Row = tuple[str, str, list[tuple[str, Rate, float]]]
Scope = tuple[Callable[[str], bool], Sequence[tuple[str, LlmClause]]]  # whose, judged by what


def report(
    budgets: Budgets, scopes: Iterable[Scope], sandbox: str | None, now: float
) -> dict[str, Any]:
    """Every (spender, entry) with spending on an `llm:` budget, or only `sandbox`'s.

    A scope is whose spending it is (a test of the spender) and the clauses it is judged
    by: a node proxy's sandboxes each by their own file's, then everyone by the node's
    (a sandbox's call is charged under both entries' patterns)."""
    found: list[dict[str, Any]] = []
    said: set[tuple[str, str]] = set()  # a pattern in two scopes is one bucket: said once
    spenders = budgets.spenders((TOKENS, COST))
    for whose, clauses in scopes:
        for entry, clause in clauses:
            budgeted = rates(clause)
            if not budgeted:
                continue
            names = [n for n in spenders.get(entry, ()) if whose(n)]
            for name in sorted(names):
                if (sandbox is not None and name != sandbox) or (name, entry) in said:
                    continue
                if len(found) == MAX_ROWS:
                    return {"usage": found, "truncated": True}
                said.add((name, entry))
                key = BudgetKey(name, entry)
                levels = [
                    {
                        "kind": kind,
                        "amount": rate.amount,
                        "window_s": rate.window_s,
                        "level": budgets.level(key, kind, rate, now),
                    }
                    for kind, rate in budgeted
                ]
                found.append({"sandbox": name, "entry": entry, "budgets": levels})
    return {"usage": found}


def rows(document: Any) -> list[Row]:
    """The (sandbox, entry, [(kind, rate, level)]) of a `report` document."""
    if not isinstance(document, dict) or not isinstance(document.get("usage"), list):
        raise ValueError("not a usage document")
    found: list[Row] = []
    for row in document["usage"]:
        if not isinstance(row, dict) or not isinstance(row.get("budgets"), list):
            raise ValueError("not a usage row")
        sandbox, entry = row.get("sandbox"), row.get("entry")
        if not isinstance(sandbox, str) or not isinstance(entry, str):
            raise ValueError("a usage row without its sandbox and entry")
        budgets = [_budget(b) for b in row["budgets"]]
        found.append((sandbox, entry, budgets))
    return found


def _budget(raw: Any) -> tuple[str, Rate, float]:
    if not isinstance(raw, dict):
        raise ValueError("not a budget")
    kind, amount, window, level = (raw.get(k) for k in ("kind", "amount", "window_s", "level"))
    numbers = (amount, window, level)
    if not isinstance(kind, str) or any(
        isinstance(n, bool) or not isinstance(n, int | float) for n in numbers
    ):
        raise ValueError("a budget without kind, amount, window_s and level")
    if not isinstance(amount, int) or not isinstance(window, int) or window < 1:
        raise ValueError("a budget's amount and window_s are whole numbers")
    return kind, Rate(amount, window), float(level)  # type: ignore[arg-type]  # checked above


def sandbox_of(query: str) -> str | None:
    """`sandbox=ID` of a query string (None: every spender); ValueError for anything else."""
    if not query:
        return None
    fields = parse_qs(query, keep_blank_values=True, strict_parsing=True, max_num_fields=4)
    values = fields.pop("sandbox", [])
    if fields or len(values) != 1 or not 0 < len(values[0]) <= MAX_SANDBOX:
        raise ValueError("expected one sandbox=ID")
    return values[0]
