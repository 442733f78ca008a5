"""Budgets (docs/configuration.md#budgets): rates, token buckets per key, located problems."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy.clauses.budget import Budget, BudgetKey, Budgets, Rate, parse_rate
from sandbox_egress.proxy.config.loader import ConfigError, parse

KEY = BudgetKey(None, "hf.example")
OTHER = BudgetKey(None, "other.example")

RATES = [
    ("5/minute", False, Rate(5, 60)),
    (" 600 / minute ", False, Rate(600, 60)),
    ("1/second", False, Rate(1, 1)),
    ("100MiB/day", True, Rate(100 * 1024**2, 86400)),
    ("3KiB/hour", True, Rate(3072, 3600)),
    ("2GiB/day", True, Rate(2 * 1024**3, 86400)),
    ("10/day", True, Rate(10, 86400)),
    ("5MiB/minute", False, "expected COUNT/WINDOW"),
    ("5/week", False, "expected COUNT/WINDOW"),
    ("0/minute", False, "expected COUNT/WINDOW"),
    ("5MB/day", True, "expected COUNT/WINDOW"),
    ("many", False, "expected COUNT/WINDOW"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "size", "expected"), RATES)
def test_parse_rate(text: str, size: bool, expected: Rate | str) -> None:
    found = parse_rate(text, size)
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found
    else:
        assert found == expected


def test_a_burst_then_the_refill_rate() -> None:
    budgets, budget = Budgets(), Budget(requests=Rate(5, 60))
    assert [budgets.admit(KEY, budget, 0, 0.0).admitted for _ in range(6)] == [True] * 5 + [False]
    refused = budgets.admit(KEY, budget, 0, 1.0)
    assert (refused.admitted, refused.budget, refused.retry_after_s) == (False, "requests", 11)
    assert budgets.admit(KEY, budget, 0, 12.0).admitted  # one request per 12 s
    assert budgets.admit(OTHER, budget, 0, 12.0).admitted  # keys are apart


def test_upload_admission_and_streaming() -> None:
    budgets, budget = Budgets(), Budget(upload=Rate(1000, 100))
    assert budgets.admit(KEY, budget, 0, 0.0).admitted  # no body: no upload spent
    assert not budgets.admit(KEY, budget, 1001, 0.0).admitted  # never fits
    assert budgets.admit(KEY, budget, 600, 0.0).admitted
    assert budgets.take_upload(KEY, budget, 600, 0.0)
    refused = budgets.admit(KEY, budget, 600, 0.0)
    assert (refused.admitted, refused.budget, refused.retry_after_s) == (False, "upload", 20)
    assert budgets.admit(KEY, budget, None, 0.0).admitted  # unknown size: metered while sent
    assert not budgets.take_upload(KEY, budget, 500, 0.0)  # crosses the budget: cut
    assert budgets.remaining(KEY, "upload", Rate(1000, 100), 0.0) == 0.0
    assert budgets.remaining(OTHER, "upload", Rate(1000, 100), 0.0) == 1000.0


def test_state_is_bounded() -> None:
    budgets, budget = Budgets(max_keys=2), Budget(requests=Rate(1, 86400))
    for name in ("a", "b", "c"):
        assert budgets.admit(BudgetKey(None, name), budget, 0, 0.0).admitted
    assert budgets.admit(BudgetKey(None, "a"), budget, 0, 0.0).admitted  # forgotten: full
    assert not budgets.admit(BudgetKey(None, "c"), budget, 0, 0.0).admitted


INVALID = [
    ({"requests": "5/fortnight"}, "network.allowlist[0].budget.requests: expected COUNT/WINDOW"),
    ({"upload": "1TB/day"}, "network.allowlist[0].budget.upload: expected COUNT/WINDOW"),
    ({}, "network.allowlist[0].budget: a budget needs requests and/or upload"),
    ({"bytes": "1/day"}, "network.allowlist[0].budget: unknown key 'bytes'"),
    ({"requests": 5}, "network.allowlist[0].budget.requests: must be a string"),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "expected"), INVALID)
def test_budget_problems_name_their_location(raw: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({"network": {"allowlist": [{"domain": "a.example", "budget": raw}]}}, "e.yaml", {})
    assert any(expected in str(p) for p in info.value.problems), info.value.problems


def test_a_budget_loads_into_the_entry() -> None:
    config = parse(
        {"network": {"allowlist": [
            {"domain": "*.hf.example", "budget": {"requests": "600/minute", "upload": "100MiB/day"}}
        ]}},
        "e.yaml",
        {},
    )  # fmt: skip
    assert config.allowlist[0].budget == Budget(Rate(600, 60), Rate(100 * 1024**2, 86400))
