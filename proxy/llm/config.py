"""The `llm:` clause of an allowlist entry (docs/configuration.md#model-apis), parsed once
into an immutable `LlmClause`.

    llm:
      api: openai                       # openai | anthropic | gemini
      models: ["gpt-5-mini", "gpt-4.1*"] # globs; absent = any model
      max_output_tokens: 4096
      budget: {tokens: "200k/hour", cost: "5USD/day"}
      prices: {"gpt-5-mini": {input: 0.25, output: 2.00}}   # USD per million tokens

Invariants:
* A budget is an `Allowance` (`proxy.llm.spending` hands it to the state backend as a
  `proxy.clauses.budget.Rate`): tokens counted one for one, cost in nano-USD (so every
  store keeps integers well inside a double's exact range). This module does not import
  the clause table's modules: the table's `llm` row imports it.
* Globs match the whole model string, case-sensitively (`fnmatchcase`); the first glob of
  `models` (or of `prices`) that matches is the one used, in the file's order.
* A problem names its location (`report(where, message)`); the clause is all or nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from sandbox_egress.common.tokens import shown
from sandbox_egress.proxy.llm import Api

Report = Callable[[str, str], None]
WINDOWS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}  # as `budget:`'s

NANO = 1_000_000_000  # nano-USD in a dollar
ANY = "*"  # the metric label of a clause without `models`
_TOKENS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kM]?)\s*/\s*([a-z]+)\s*$")
_COST = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*USD\s*/\s*([a-z]+)\s*$")
_SCALE = {"": 1, "k": 1000, "M": 1_000_000}


@dataclass(frozen=True, slots=True)
class Allowance:
    amount: int  # units (tokens, nano-USD) per window, and the most a bucket holds
    window_s: int


@dataclass(frozen=True, slots=True)
class Price:
    glob: str
    input: float  # USD per million tokens = micro-USD per token
    output: float


@dataclass(frozen=True, slots=True)
class LlmClause:
    api: Api
    models: tuple[str, ...] | None = None  # None: any model
    max_output_tokens: int | None = None
    tokens: Allowance | None = None  # input + output tokens per window
    cost: Allowance | None = None  # nano-USD per window
    prices: tuple[Price, ...] = ()

    def glob_of(self, model: str) -> str | None:
        """The first `models` glob that matches (ANY without `models`), None: refused."""
        if self.models is None:
            return ANY
        return next((glob for glob in self.models if fnmatchcase(model, glob)), None)

    def price_of(self, model: str) -> Price | None:
        return next((p for p in self.prices if fnmatchcase(model, p.glob)), None)

    @property
    def budgeted(self) -> bool:
        return self.tokens is not None or self.cost is not None


def parse_llm(raw: Any, where: str, report: Report) -> tuple[bool, LlmClause | None]:
    """(valid, clause) of an entry's `llm` (shaped by the JSON Schema; checked again here)."""
    if raw is None:
        return True, None
    if not isinstance(raw, dict):
        report(where, "must be a mapping of api, models, max_output_tokens, budget, prices")
        return False, None
    problems: list[tuple[str, str]] = []
    api = raw.get("api")
    if api not in {a.value for a in Api}:
        problems.append((f"{where}.api", f"must be openai, anthropic or gemini (got {shown(api)})"))
    models = raw.get("models")
    if models is not None and (
        not isinstance(models, list)
        or not models
        or not all(isinstance(m, str) and m for m in models)
    ):
        problems.append((f"{where}.models", "must be a non-empty list of model globs"))
    cap = raw.get("max_output_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        problems.append((f"{where}.max_output_tokens", "must be a whole number above 0"))
    tokens, cost = _budget(raw.get("budget"), f"{where}.budget", problems)
    prices = _prices(raw.get("prices"), f"{where}.prices", problems)
    for at, message in problems:
        report(at, message)
    if problems:
        return False, None
    return True, LlmClause(
        Api(str(api)), None if models is None else tuple(models), cap, tokens, cost, prices
    )


def _budget(raw: Any, where: str, problems: list[tuple[str, str]]) -> tuple[Allowance | None, ...]:
    if raw is None:
        return None, None
    if not isinstance(raw, dict) or not raw or set(raw) - {"tokens", "cost"}:
        problems.append((where, "must be a mapping of tokens and/or cost"))
        return None, None
    tokens = cost = None
    if "tokens" in raw:
        tokens = parse_amount(raw["tokens"], _TOKENS)
        if tokens is None:
            why = 'expected COUNT/WINDOW such as "200k/hour" (k or M; second..day)'
            problems.append((f"{where}.tokens", f"{why} (got {shown(raw['tokens'])})"))
    if "cost" in raw:
        cost = parse_amount(raw["cost"], _COST)
        if cost is None:
            why = 'expected AMOUNT USD/WINDOW such as "5USD/day"'
            problems.append((f"{where}.cost", f"{why} (got {shown(raw['cost'])})"))
    return tokens, cost


def parse_amount(text: Any, form: re.Pattern[str]) -> Allowance | None:
    """A token rate (`"200k/hour"`) or, with `_COST`, a cost rate in nano-USD."""
    match = form.match(text) if isinstance(text, str) else None
    if match is None or match[match.lastindex or 0] not in WINDOWS:
        return None
    scale = _SCALE[match[2]] if form is _TOKENS else NANO
    amount = round(float(match[1]) * scale)
    return Allowance(amount, WINDOWS[match[match.lastindex or 0]]) if amount > 0 else None


def _prices(raw: Any, where: str, problems: list[tuple[str, str]]) -> tuple[Price, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.append((where, "must be a mapping of model glob to {input, output}"))
        return ()
    found: list[Price] = []
    for glob, price in raw.items():
        ok = isinstance(price, dict) and set(price) == {"input", "output"}
        values = [price.get(k) for k in ("input", "output")] if ok else []
        if not ok or not all(_number(v) for v in values):
            problems.append((f"{where}.{glob}", "must be {input: USD, output: USD} per 1M tokens"))
            continue
        found.append(Price(str(glob), float(values[0]), float(values[1])))
    return tuple(found)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def unpriced(clause: LlmClause) -> list[str]:
    """The `models` globs (ANY without `models`) that a cost budget may admit with no
    price: a glob is priced when a price glob equals it or matches it as a string."""
    if clause.cost is None:
        return []
    globs = clause.models if clause.models is not None else (ANY,)
    return [g for g in globs if not any(fnmatchcase(g, p.glob) for p in clause.prices)]
