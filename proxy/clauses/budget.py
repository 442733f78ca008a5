"""Budgets (docs/configuration.md#budgets): how many requests, and how many request-body
bytes, an entry may carry per window.

A budget is a token bucket per `BudgetKey`: `"600/minute"` holds 600 tokens, refilled at
600 per 60 s, so it admits a burst of 600 and then 10 a second. `admit` takes one request
token (and refuses a body announced larger than the upload left); `take_upload` takes
streamed body bytes and says when an upload has crossed its budget, to be cut.

Invariants:
* State is in memory, per key, bounded (`MAX_KEYS`, least recently used forgotten
  first): a restart or a forgotten key starts with a full budget (the docs say so).
* The key is `BudgetKey(sandbox, entry)`: `sandbox` is None until one proxy serves many
  sandboxes; `entry` is the deciding entry's pattern (unique in a configuration, and
  stable across reloads, so a reload keeps what was spent).
* The clock is injected (`now`, monotonic seconds): nothing here reads time.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.common.tokens import shown

Report = Callable[[str, str], None]

WINDOWS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
MAX_KEYS = 65536
_RATE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*/\s*([a-z]+)\s*$")


@dataclass(frozen=True, slots=True)
class Rate:
    amount: int  # tokens (requests or bytes) per window, and the burst
    window_s: int

    @property
    def per_second(self) -> float:
        return self.amount / self.window_s


@dataclass(frozen=True, slots=True)
class Budget:
    requests: Rate | None = None
    upload: Rate | None = None


@dataclass(frozen=True, slots=True)
class BudgetKey:
    sandbox: str | None
    entry: str


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    retry_after_s: int = 0  # whole seconds until the request would be admitted
    budget: str = ""  # which budget refused: "requests" or "upload"
    reserved: int = 0  # upload bytes an admitted request already spent (proxy.state)
    unavailable: bool = False  # the shared state did not answer and on_error is deny


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float

    def refill(self, rate: Rate, now: float) -> None:
        self.tokens = min(rate.amount, self.tokens + (now - self.at) * rate.per_second)
        self.at = now

    def wait(self, rate: Rate, need: float) -> int:
        return max(1, math.ceil((need - self.tokens) / rate.per_second))


class Budgets:
    """Every key's buckets (in memory, bounded)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._buckets: OrderedDict[tuple[BudgetKey, str], _Bucket] = OrderedDict()
        self._max_keys = max_keys

    def _bucket(self, key: BudgetKey, kind: str, rate: Rate, now: float) -> _Bucket:
        found = self._buckets.get((key, kind))
        if found is None:
            found = self._buckets[(key, kind)] = _Bucket(float(rate.amount), now)
            while len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end((key, kind))
            found.refill(rate, now)
        return found

    def admit(self, key: BudgetKey, budget: Budget, body: int | None, now: float) -> Admission:
        """One request with a body of `body` bytes (None: unknown, 0: none)."""
        requests = uploads = None
        if budget.requests is not None:
            requests = self._bucket(key, "requests", budget.requests, now)
            if requests.tokens < 1:
                return Admission(False, requests.wait(budget.requests, 1), "requests")
        if budget.upload is not None and body != 0:
            uploads = self._bucket(key, "upload", budget.upload, now)
            need = 1 if body is None else body
            if need > budget.upload.amount or uploads.tokens < need:
                wait = uploads.wait(budget.upload, min(need, budget.upload.amount))
                return Admission(False, wait, "upload")
        if requests is not None:
            requests.tokens -= 1
        return Admission(True)

    def take_upload(self, key: BudgetKey, budget: Budget, size: int, now: float) -> bool:
        """Count `size` streamed body bytes; False once the upload crossed its budget."""
        if budget.upload is None or size == 0:
            return True
        bucket = self._bucket(key, "upload", budget.upload, now)
        bucket.tokens -= size
        return bucket.tokens >= 0

    # Spending metered after the fact (the `llm:` clause's tokens and cost, issue 46): a
    # request is admitted while a whole unit is left; what it spent is charged once known,
    # and may take the bucket below zero (the next requests wait until it refills).
    def below(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...], now: float) -> Admission:
        """Admitted while every `(kind, rate)` bucket holds at least one unit; spends none."""
        for kind, rate in rates:
            bucket = self._bucket(key, kind, rate, now)
            if bucket.tokens < 1:
                return Admission(False, bucket.wait(rate, 1), kind)
        return Admission(True)

    def charge(self, key: BudgetKey, kind: str, rate: Rate, amount: int, now: float) -> None:
        self._bucket(key, kind, rate, now).tokens -= amount

    def level(self, key: BudgetKey, kind: str, rate: Rate, now: float) -> float:
        """Units left now, below zero when overspent, without creating state."""
        found = self._buckets.get((key, kind))
        if found is None:
            return float(rate.amount)
        return min(rate.amount, found.tokens + (now - found.at) * rate.per_second)

    def spenders(self, kinds: Collection[str]) -> dict[str, set[str]]:
        """Entry pattern -> the sandboxes with a bucket of one of `kinds` on it (`usage`,
        issue 46), in one pass over every key."""
        found: dict[str, set[str]] = {}
        for key, kind in self._buckets:
            if kind in kinds and key.sandbox is not None:
                found.setdefault(key.entry, set()).add(key.sandbox)
        return found

    def remaining(self, key: BudgetKey, kind: str, rate: Rate, now: float) -> float:
        """Tokens left now (the metric's value), without creating state."""
        found = self._buckets.get((key, kind))
        if found is None:
            return float(rate.amount)
        return max(0.0, min(rate.amount, found.tokens + (now - found.at) * rate.per_second))


# -- loading -------------------------------------------------------------------------------


def parse(
    raw: Mapping[str, Any], where: str, report: Report, failed: frozenset[str]
) -> tuple[bool, dict[str, Any]]:
    """The clause's key `budget`; one the schema refused is not parsed again."""
    if "budget" in failed:
        return False, {"budget": None}
    ok, budget = parse_budget(raw.get("budget"), f"{where}.budget", report)
    return ok, {"budget": budget}


def parse_budget(raw: Any, where: str, report: Report) -> tuple[bool, Budget | None]:
    """(valid, budget) of an entry's `budget` (shaped by the JSON Schema)."""
    if raw is None:
        return True, None
    rates: dict[str, Rate | None] = {"requests": None, "upload": None}
    ok = True
    for kind in ("requests", "upload"):
        if kind in raw:
            rate = parse_rate(raw[kind], kind == "upload")
            if isinstance(rate, str):
                report(f"{where}.{kind}", f"{rate} (got {shown(raw[kind])})")
                ok = False
            else:
                rates[kind] = rate
    if ok and rates["requests"] is None and rates["upload"] is None:
        report(where, "a budget needs requests and/or upload")
        ok = False
    return ok, Budget(rates["requests"], rates["upload"]) if ok else None


def parse_rate(text: Any, size: bool) -> Rate | str:
    """`"600/minute"` or (`size`) `"100MiB/day"`, or why it is not one."""
    units = "KiB, MiB or GiB" if size else "no unit"
    expected = f"expected COUNT/WINDOW ({units}; window second, minute, hour or day)"
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None or match[3] not in WINDOWS:
        return expected
    amount, unit = int(match[1]), match[2]
    if (unit and not size) or unit not in UNITS or amount <= 0:
        return expected
    return Rate(amount * UNITS[unit], WINDOWS[match[3]])
