"""The clause tables (issue 45): `proxy.clauses.CLAUSES` and `addons.clauses.ADAPTERS`
agree with each other, with the schema and with the reason codes, and the request
stage runs the head rules by phase in table order."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import fields, replace
from pathlib import Path

from sandbox_egress.addons.clauses import ADAPTERS, Adapter
from sandbox_egress.proxy.clauses import CLAUSES, CORE_KEYS, CORE_REASONS, Head, Phase, heads
from sandbox_egress.proxy.decision import MESSAGES, Decision, Reason

SCHEMA = Path(__file__).parents[2] / "schemas" / "egress-config.schema.json"
STEPS = ("admit", "write", "hold", "holds", "judge", "answer")


def entry_keys() -> set[str]:
    schema = json.loads(SCHEMA.read_text())
    return set(schema["$defs"]["entry"]["properties"])


def test_every_clause_has_one_row_and_every_adapter_a_clause() -> None:
    names = [c.name for c in CLAUSES]
    assert len(names) == len(set(names))
    adapters = [a.clause for a in ADAPTERS]
    assert len(adapters) == len(set(adapters))
    assert set(adapters) <= set(names)


def test_every_adapter_acts_at_some_step() -> None:
    """An adapter row that overrides nothing would be dead weight in every walk."""
    for adapter in ADAPTERS:
        overridden = [s for s in STEPS if getattr(type(adapter), s) is not getattr(Adapter, s)]
        assert overridden, adapter.clause


def test_a_clause_whose_head_gives_a_part_has_an_adapter_to_act_on_it() -> None:
    adapters = {a.clause for a in ADAPTERS}
    assert {c.name for c in CLAUSES if c.head is not None} <= adapters


def test_the_adapters_follow_the_clause_table_order() -> None:
    order = [c.name for c in CLAUSES]
    assert [a.clause for a in ADAPTERS] == [n for n in order if n in {a.clause for a in ADAPTERS}]


def test_every_reason_has_exactly_one_owner() -> None:
    owned = Counter(r for c in CLAUSES for r in c.reasons)
    assert [r for r, n in owned.items() if n > 1] == []
    assert set(owned) | CORE_REASONS == set(Reason)
    assert set(owned) & CORE_REASONS == set()
    assert set(MESSAGES) == set(Reason)  # each has its sentence


def test_every_entry_key_of_the_schema_belongs_to_a_clause_or_the_core() -> None:
    clause_keys = {k for c in CLAUSES for k in c.keys}
    assert entry_keys() == clause_keys | CORE_KEYS
    assert clause_keys & CORE_KEYS == set()


def test_a_clause_that_owns_keys_parses_them_or_says_the_core_does() -> None:
    """Only the credential binding is parsed by the core (it needs `credentials:`)."""
    unparsed = {k for c in CLAUSES if c.parse is None for k in c.keys}
    assert unparsed == {"credential"}


def test_head_rules_run_by_phase_in_table_order() -> None:
    assert [c.name for c in heads(Phase.POLICY)] == ["rules"]
    assert [c.name for c in heads(Phase.SIGNED)] == ["sigv4"]
    assert [c.name for c in heads(Phase.ALLOWED)] == ["credentials", "mcp", "llm"]
    ordered = [c.name for p in Phase for c in heads(p)]
    assert sorted(ordered) == sorted(c.name for c in CLAUSES if c.head is not None)


def test_a_head_with_a_new_decision_is_a_copy_of_every_other_field() -> None:
    """`Head.deciding` (the copy per head rule, D440) keeps every field but the decision,
    whatever fields the head grows: each field a distinct value, compared with the
    generic copy it replaces; the same decision gives the same head, not a copy."""
    values = {f.name: object() for f in fields(Head)}
    head = Head(**values)  # type: ignore[arg-type]
    decision = Decision.deny(Reason.RULE_MISMATCH)
    copied = head.deciding(decision)
    assert copied == replace(head, decision=decision) and copied is not head
    assert head.deciding(values["decision"]) is head  # type: ignore[arg-type]
    assert head.decision is values["decision"]  # the original is never changed


def test_the_head_rules_of_a_phase_are_the_table_s_in_order_each_time() -> None:
    for phase in Phase:
        expected = tuple(c for c in CLAUSES if c.head is not None and c.phase is phase)
        assert heads(phase) == expected and heads(phase) is heads(phase)
