"""The `llm` clause's row (docs/configuration.md#model-apis, issue 46): an entry's
`llm:` parsed by `proxy.llm.config`, and the head rule that says whether an allowed
request is a generation call of the entry's model API.

The rule judges what the head alone tells — a gemini model is in the path — and hands
the call to the adapter (`addons.clauses.llm`) as its part (`LlmPart`): the adapter
checks the budgets before anything is sent, holds and judges the body (the model of an
openai or anthropic call, the output cap), meters the answer and charges the spending.

A sandbox's request is judged by its entry's clause and by its node's (a ceiling, like
rules and MCP policies): every clause must admit the model, the lowest cap applies, and
each clause's budgets are checked and charged under its own entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_egress.proxy.clauses.base import Head, Report, Ruling
from sandbox_egress.proxy.decision import Decision
from sandbox_egress.proxy.llm.config import LlmClause, parse_llm
from sandbox_egress.proxy.llm.part import LlmPart, Metered
from sandbox_egress.proxy.llm.requests import classify, model_verdict


def parse(
    raw: Mapping[str, Any], where: str, report: Report, failed: frozenset[str]
) -> tuple[bool, dict[str, Any]]:
    if "llm" in failed:
        return False, {}
    ok, clause = parse_llm(raw.get("llm"), f"{where}.llm", report)
    return ok, {"llm": clause} if clause is not None else {}


def head(ask: Head) -> Ruling:
    decision = ask.decision
    if not decision.allowed or decision.report:
        return Ruling(decision)
    node = decision.node.entry if decision.node is not None else None
    judges: list[Metered] = []
    for entry in (decision.entry, node):
        clause = entry.clauses.get("llm") if entry is not None else None
        if entry is None or not isinstance(clause, LlmClause):
            continue
        call = classify(clause, ask.method, ask.located.path)
        if call is not None and all(j.clause is not clause for j in judges):
            judges.append(Metered(entry.pattern, clause, call))
    if not judges:
        return Ruling(decision)
    for judge in judges:
        if judge.call.model is None:
            continue
        refused, _glob = model_verdict(judge.clause, judge.call.model)
        if refused is not None:
            return Ruling(Decision.deny(refused, decision.entry, "llm"))
    return Ruling(decision, LlmPart(tuple(judges)))
