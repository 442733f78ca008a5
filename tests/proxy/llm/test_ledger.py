"""`GET /usage`'s document (proxy/llm/ledger.py): a process's memory read per scope and
spender at one instant, read back by the CLI, and its one query parameter."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_egress.proxy.clauses.budget import BudgetKey, Budgets, Rate
from sandbox_egress.proxy.llm import ledger
from sandbox_egress.proxy.llm.config import Allowance, LlmClause

DAY = 86400
OPENAI = LlmClause("openai", tokens=Allowance(1000, DAY), cost=Allowance(10**9, DAY))
ANTHROPIC = LlmClause("anthropic", tokens=Allowance(500, 3600))
UNBUDGETED = LlmClause("gemini")


def spent() -> Budgets:
    budgets = Budgets()
    tokens, cost = Rate(1000, DAY), Rate(10**9, DAY)
    budgets.charge(BudgetKey("sb-b", "api.openai.com"), "llm_tokens", tokens, 300, 0.0)
    budgets.charge(BudgetKey("sb-a", "api.openai.com"), "llm_cost", cost, 5000, 0.0)
    budgets.charge(BudgetKey("sb-a", "api.anthropic.com"), "llm_tokens", Rate(500, 3600), 600, 0)
    budgets.charge(BudgetKey(None, "api.openai.com"), "llm_tokens", tokens, 1, 0.0)  # no spender
    budgets.charge(BudgetKey("sb-c", "api.openai.com"), "upload", tokens, 1, 0.0)  # not llm
    return budgets


CLAUSES = [("api.openai.com", OPENAI), ("api.anthropic.com", ANTHROPIC), ("x.test", UNBUDGETED)]


def test_every_spender_with_every_budget_of_its_entry() -> None:
    found = ledger.report(spent(), [(lambda _: True, CLAUSES)], None, 0.0)
    assert found == {
        "usage": [
            {"sandbox": "sb-a", "entry": "api.openai.com", "budgets": [
                {"kind": "llm_tokens", "amount": 1000, "window_s": DAY, "level": 1000.0},
                {"kind": "llm_cost", "amount": 10**9, "window_s": DAY, "level": 10**9 - 5000},
            ]},
            {"sandbox": "sb-b", "entry": "api.openai.com", "budgets": [
                {"kind": "llm_tokens", "amount": 1000, "window_s": DAY, "level": 700.0},
                {"kind": "llm_cost", "amount": 10**9, "window_s": DAY, "level": 10**9},
            ]},
            {"sandbox": "sb-a", "entry": "api.anthropic.com", "budgets": [
                {"kind": "llm_tokens", "amount": 500, "window_s": 3600, "level": -100.0},
            ]},
        ]
    }  # fmt: skip
    assert ledger.rows(found)[2] == (
        "sb-a",
        "api.anthropic.com",
        [("llm_tokens", Rate(500, 3600), -100.0)],
    )
    # 36 s later, 5 tokens of the hour's 500 are back
    later = ledger.report(spent(), [(lambda _: True, CLAUSES)], "sb-a", 36.0)["usage"][1]
    assert later["budgets"][0]["level"] == pytest.approx(-95.0)


def test_one_sandbox_and_scopes_of_their_own() -> None:
    only = ledger.report(spent(), [(lambda _: True, CLAUSES)], "sb-b", 0.0)
    assert [(r["sandbox"], r["entry"]) for r in only["usage"]] == [("sb-b", "api.openai.com")]
    assert ledger.report(spent(), [(lambda _: True, CLAUSES)], "nobody", 0.0) == {"usage": []}
    # sb-a judged by its own file (anthropic, openai), everyone by the node's (openai):
    # the pattern in both is one bucket, said once
    scopes = [("sb-a".__eq__, CLAUSES[1::-1]), (lambda _: True, CLAUSES[:1])]
    found = ledger.report(spent(), scopes, None, 0.0)
    assert [(r["sandbox"], r["entry"]) for r in found["usage"]] == [
        ("sb-a", "api.anthropic.com"),
        ("sb-a", "api.openai.com"),
        ("sb-b", "api.openai.com"),
    ]
    only_node = [("sb-b".__eq__, []), (lambda n: n != "sb-a", CLAUSES[:1])]
    found = ledger.report(spent(), only_node, None, 0.0)
    assert [r["sandbox"] for r in found["usage"]] == ["sb-b"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", None), ("sandbox=sb-a", "sb-a"), ("sandbox=client-10.0.0.2", "client-10.0.0.2")],
)
def test_the_sandbox_parameter(query: str, expected: str | None) -> None:
    assert ledger.sandbox_of(query) == expected


@pytest.mark.parametrize(
    "query",
    ["sandbox=", "sandbox=a&sandbox=b", "other=1", "sandbox=a&other=1", "sandbox", "=a",
     "sandbox=" + "x" * 257, "&".join(["a=1"] * 5)],
)  # fmt: skip
def test_any_other_query_is_refused(query: str) -> None:
    with pytest.raises(ValueError):
        ledger.sandbox_of(query)


@given(st.text(min_size=1, max_size=ledger.MAX_SANDBOX))
def test_any_sandbox_spelled_by_the_cli_reads_back(name: str) -> None:
    """The CLI's `urlencode` of any id is read back as that very id."""
    assert ledger.sandbox_of(urlencode({"sandbox": name})) == name


def test_at_most_max_rows_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger, "MAX_ROWS", 2)
    found = ledger.report(spent(), [(lambda _: True, CLAUSES)], None, 0.0)
    assert [(r["sandbox"], r["entry"]) for r in found["usage"]] == [
        ("sb-a", "api.openai.com"),
        ("sb-b", "api.openai.com"),
    ]
    assert found["truncated"] is True
    assert "truncated" not in ledger.report(spent(), [(lambda _: True, CLAUSES)], "sb-a", 0.0)
