"""The `llm` row of the clause table (proxy/clauses/llm.py): the loader parses `llm:`,
and `decide_request` hands a generation call's judges to the adapter, refusing a gemini
model its path names that no glob admits; other requests carry no part."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.llm import Api, Endpoint
from sandbox_egress.proxy.llm.config import LlmClause
from sandbox_egress.proxy.llm.part import LlmPart
from sandbox_egress.proxy.llm.requests import Call
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, decide_request
from tests.proxy.test_stages import ask, resolve

GEMINI = {"domain": "api.example", "llm": {"api": "gemini", "models": ["gemini-2.5-*"]}}
NETWORK = parse({"network": {"allowlist": [GEMINI]}}, "env.yaml", {})
POLICY = Policy(NETWORK)


def decide(method: str, path: str):  # type: ignore[no-untyped-def]
    base = ask("api.example", method=method)
    request = replace(base, names=replace(base.names, path=path))
    return asyncio.run(decide_request(POLICY, resolve, ConnectionFacts(), request))


def test_the_loader_keeps_the_parsed_clause() -> None:
    [entry] = NETWORK.allowlist
    assert entry.clauses["llm"] == LlmClause(Api.GEMINI, ("gemini-2.5-*",))


def test_a_generation_call_carries_its_judges() -> None:
    answer = decide("POST", "/v1beta/models/gemini-2.5-pro:generateContent")
    assert answer.decision.reason is Reason.ALLOWLISTED
    part = answer.parts["llm"]
    assert isinstance(part, LlmPart)
    assert [(j.entry, j.call) for j in part.judges] == [
        ("api.example", Call(Endpoint.GENERATE, "gemini-2.5-pro"))
    ]


def test_a_model_in_the_path_is_judged_at_the_head() -> None:
    answer = decide("POST", "/v1beta/models/gemini-1.5-pro:streamGenerateContent?alt=sse")
    assert (answer.decision.reason, answer.decision.clause) == (Reason.LLM_MODEL_DENIED, "llm")
    assert "llm" not in answer.parts


@pytest.mark.parametrize("where", [("GET", "/v1beta/models"), ("POST", "/v1beta/files")])
def test_other_requests_follow_the_rules_only(where: tuple[str, str]) -> None:
    answer = decide(*where)
    assert answer.decision.reason is Reason.ALLOWLISTED and "llm" not in answer.parts


def test_a_bad_clause_is_a_located_error() -> None:
    bad = {"domain": "api.example", "llm": {"api": "openai", "budget": {"tokens": "lots"}}}
    with pytest.raises(ConfigError) as error:
        parse({"network": {"allowlist": [bad]}}, "env.yaml", {})
    assert [p.location for p in error.value.problems] == ["network.allowlist[0].llm.budget.tokens"]
