"""One call judged by every clause that holds it and billed (proxy.llm.call)."""

from __future__ import annotations

import json
import re

from sandbox_egress.proxy.audit.log import AuditRecord, masked_record
from sandbox_egress.proxy.clauses.budget import Rate
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.llm import Api, Endpoint
from sandbox_egress.proxy.llm.call import Bill, Charge, bill, judge
from sandbox_egress.proxy.llm.config import Allowance, LlmClause, Price
from sandbox_egress.proxy.llm.part import LlmPart, Metered
from sandbox_egress.proxy.llm.requests import Call
from sandbox_egress.proxy.llm.streams import Meter
from testbed import model_wire as wire

CHAT = Call(Endpoint.CHAT)
PRICED = (Price("gpt-5*", 1.0, 4.0),)
OWN = LlmClause(Api.OPENAI, ("gpt-5*",), 500, Allowance(1000, 3600), Allowance(10**9, 3600), PRICED)
NODE = LlmClause(Api.OPENAI, ("gpt-5-mini", "gpt-4*"), 200, Allowance(5000, 86400))
BOTH = LlmPart((Metered("api.openai.com", OWN, CHAT), Metered("*.openai.com", NODE, CHAT)))


def test_every_clause_admits_the_model_and_the_lowest_cap_applies() -> None:
    verdict = judge(BOTH, b'{"model": "gpt-5-mini", "max_tokens": 900, "stream": true}')
    assert (verdict.reason, verdict.globs, verdict.strip) == (None, ("gpt-5*", "gpt-5-mini"), True)
    assert verdict.body is not None
    assert json.loads(verdict.body) == {
        "model": "gpt-5-mini",
        "max_tokens": 200,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    refused = judge(BOTH, b'{"model": "gpt-5-nano"}')  # the node's clause does not admit it
    assert (refused.reason, refused.globs) == (Reason.LLM_MODEL_DENIED, ("gpt-5*",))


def test_a_bill_per_clause_in_its_own_units() -> None:
    verdict = judge(BOTH, b'{"model": "gpt-5-mini"}')
    content_type, pieces = wire.openai_chat("gpt-5-mini", "hi", (1000, 100), False, False)
    meter = Meter(Api.OPENAI, content_type)
    for piece in pieces:
        meter.feed(piece)
    meter.close()
    # 1000 in at 1 USD/M + 100 out at 4 USD/M = 1400 micro-USD
    assert bill(BOTH, verdict, meter, 40) == Bill(
        "gpt-5-mini",
        1000,
        100,
        False,
        (
            Charge(
                "api.openai.com",
                (
                    ("llm_tokens", Rate(1000, 3600), 1100),
                    ("llm_cost", Rate(10**9, 3600), 1_400_000),
                ),
                "gpt-5*",
                1_400_000,
            ),
            Charge("*.openai.com", (("llm_tokens", Rate(5000, 86400), 1100),), "gpt-5-mini", None),
        ),
    )
    assert bill(BOTH, verdict, meter, 40).audit() == {
        "llm_model": "gpt-5-mini",
        "llm_input_tokens": 1000,
        "llm_output_tokens": 100,
        "llm_cost_usd": 0.0014,
    }


def test_no_answer_estimates_the_request_and_an_error_answer_spends_nothing() -> None:
    verdict = judge(BOTH, b'{"model": "gpt-5-mini"}')
    lost = bill(BOTH, verdict, None, 401)
    assert (lost.input, lost.output, lost.estimated) == (101, 0, True)
    unreached = bill(BOTH, verdict, None, 401, reached=False)
    assert (unreached.input, unreached.output, unreached.estimated) == (0, 0, False)
    refused = Meter(Api.OPENAI, "application/json")
    refused.feed(b'{"error": {"message": "rate limited"}}')
    refused.close()
    nothing = bill(BOTH, verdict, refused, 401, status=429)
    assert (nothing.input, nothing.output, nothing.estimated) == (0, 0, False)
    assert nothing.per_clause[0].charges == ()


def test_the_model_in_the_audit_line_is_bounded_and_masked() -> None:
    own = LlmPart(BOTH.judges[:1])
    verdict = judge(own, b'{"model": "gpt-5-' + b"x" * 500 + b'"}')
    assert verdict.reason is None  # gpt-5* admits it
    fields = bill(own, verdict, None, 10, reached=False).audit()
    assert fields["llm_model"] == ("gpt-5-" + "x" * 500)[:200]
    record = AuditRecord(
        "c", "POST", "https", "h", 443, "allow", "allowlisted", None, (), 200, 0, 0, 0.0,
        extra=(("llm_model", "gpt-5-TOPSECRET"), ("llm_input_tokens", 3)),
    )  # fmt: skip
    shown = masked_record(record, (re.compile(b"TOPSECRET"),))
    assert shown.extra == (("llm_model", "gpt-5-[secret]"), ("llm_input_tokens", 3))
