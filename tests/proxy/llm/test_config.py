"""The `llm:` clause parsed (proxy.llm.config): values, problems named by location, and
`unpriced` for `check`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.proxy.config.lint import warnings
from sandbox_egress.proxy.llm import Api
from sandbox_egress.proxy.llm.config import ANY, Allowance, LlmClause, Price, parse_llm, unpriced
from sandbox_egress.proxy.llm.prices import cost_of

SPEC = {
    "api": "openai",
    "models": ["gpt-5-mini", "gpt-4.1*"],
    "max_output_tokens": 4096,
    "budget": {"tokens": "200k/hour", "cost": "5USD/day"},
    "prices": {
        "gpt-5-mini": {"input": 0.25, "output": 2.00},
        "gpt-4.1*": {"input": 2, "output": 8},
    },
}


def parsed(raw: Any) -> tuple[bool, LlmClause | None, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    ok, clause = parse_llm(raw, "network.allowlist[0].llm", lambda w, m: problems.append((w, m)))
    return ok, clause, problems


def test_the_spec_example() -> None:
    ok, clause, problems = parsed(SPEC)
    assert ok and problems == []
    assert clause == LlmClause(
        Api.OPENAI,
        ("gpt-5-mini", "gpt-4.1*"),
        4096,
        Allowance(200_000, 3600),
        Allowance(5_000_000_000, 86400),
        (Price("gpt-5-mini", 0.25, 2.0), Price("gpt-4.1*", 2.0, 8.0)),
    )
    assert clause.glob_of("gpt-4.1-mini") == "gpt-4.1*"
    assert clause.glob_of("gpt-4o") is None
    assert clause.glob_of("GPT-5-MINI") is None  # case-sensitive
    assert unpriced(clause) == []


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("200k/hour", Allowance(200_000, 3600)),
        ("1M/day", Allowance(1_000_000, 86400)),
        ("50 / minute", Allowance(50, 60)),
        ("1.5k/second", Allowance(1500, 1)),
    ],
)
def test_token_rates(text: str, rate: Allowance) -> None:
    assert parsed({"api": "gemini", "budget": {"tokens": text}})[1] == LlmClause(
        Api.GEMINI, tokens=rate
    )


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"api": "bard"}, "network.allowlist[0].llm.api"),
        ({"api": "openai", "models": []}, "network.allowlist[0].llm.models"),
        ({"api": "openai", "models": [""]}, "network.allowlist[0].llm.models"),
        ({"api": "openai", "max_output_tokens": 0}, "network.allowlist[0].llm.max_output_tokens"),
        (
            {"api": "openai", "max_output_tokens": True},
            "network.allowlist[0].llm.max_output_tokens",
        ),
        (
            {"api": "openai", "budget": {"tokens": "10/fortnight"}},
            "network.allowlist[0].llm.budget.tokens",
        ),
        ({"api": "openai", "budget": {"cost": "5EUR/day"}}, "network.allowlist[0].llm.budget.cost"),
        ({"api": "openai", "budget": {"cost": "0USD/day"}}, "network.allowlist[0].llm.budget.cost"),
        ({"api": "openai", "budget": {"requests": "1/day"}}, "network.allowlist[0].llm.budget"),
        ({"api": "openai", "prices": {"x": {"input": 1}}}, "network.allowlist[0].llm.prices.x"),
        (
            {"api": "openai", "prices": {"x": {"input": -1, "output": 1}}},
            "network.allowlist[0].llm.prices.x",
        ),
    ],
)
def test_problems_name_their_location(raw: dict[str, Any], where: str) -> None:
    ok, clause, problems = parsed(raw)
    assert (ok, clause) == (False, None)
    assert [w for w, _ in problems] == [where]


def test_unpriced_names_the_globs_a_cost_budget_may_admit_without_a_price() -> None:
    ok, clause, _ = parsed(
        {
            "api": "openai",
            "models": ["gpt-5*", "gpt-4.1-mini", "o3"],
            "budget": {"cost": "1USD/hour"},
            "prices": {"gpt-5*": {"input": 1, "output": 1}, "gpt-4.1*": {"input": 1, "output": 1}},
        }
    )
    assert ok and clause is not None
    assert unpriced(clause) == ["o3"]
    _, any_model, _ = parsed({"api": "openai", "budget": {"cost": "1USD/hour"}})
    assert any_model is not None and unpriced(any_model) == [ANY]
    _, tokens_only, _ = parsed({"api": "openai", "budget": {"tokens": "1k/hour"}})
    assert tokens_only is not None and unpriced(tokens_only) == []


def test_cost_in_nano_dollars_rounded_up() -> None:
    _, clause, _ = parsed(SPEC)
    assert clause is not None
    # 1000 in at 0.25/M = 250 micro-USD; 500 out at 2/M = 1000 micro-USD
    assert cost_of(clause, "gpt-5-mini", 1000, 500) == 1_250_000
    assert cost_of(clause, "gpt-5-mini", 1, 0) == 250
    assert cost_of(clause, "gpt-4o", 1, 1) is None


def test_check_warns_of_cost_budget_globs_without_a_price(tmp_path: Path) -> None:
    config = tmp_path / "egress.yaml"
    config.write_text(
        "network:\n  allowlist:\n    - domain: api.openai.com\n      llm:\n        api: openai\n"
        '        models: ["gpt-5*", "o3"]\n        budget: {cost: "5USD/day"}\n'
        '        prices: {"gpt-5*": {input: 1, output: 2}}\n'
        "    - domain: api.anthropic.com\n      llm: {api: anthropic, budget: {cost: 1USD/day}}\n"
    )
    found = [(p.location, p.message) for p in warnings(config)]
    assert found == [
        (
            "network.allowlist[0].llm.prices",
            "llm.budget.cost needs a price for every model it admits; no llm.prices glob "
            "prices o3 (such a model is refused: llm_model_unpriced)",
        ),
        (
            "network.allowlist[1].llm.prices",
            "llm.budget.cost needs a price for every model it admits; no llm.prices glob "
            "prices * (such a model is refused: llm_model_unpriced)",
        ),
    ]
