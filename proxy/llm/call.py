"""One generation call through the proxy, from its head to its bill (issue 46): the
clauses judging it (`LlmPart`, the head rule's answer), the judgement of its held body
by every one of them (`judge`), and what it spent once its answer is done (`bill`).

Invariants:
* Every clause must admit the model; each rewrites the body the previous one produced,
  so the lowest output cap applies; the usage chunk is removed when any of them asked.
* A bill is charged once per clause, under that clause's entry, in its own units.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox_egress.proxy.clauses.budget import Rate
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.llm.part import LlmPart
from sandbox_egress.proxy.llm.prices import cost_of
from sandbox_egress.proxy.llm.requests import judge_body
from sandbox_egress.proxy.llm.spending import charges
from sandbox_egress.proxy.llm.streams import Meter

MODEL_SHOWN = 200  # characters of a model name in the audit line


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: Reason | None
    model: str = ""
    globs: tuple[str, ...] = ()  # per judge: the matching `models` glob
    body: bytes | None = None  # the body to send when rewritten
    strip: bool = False


def judge(part: LlmPart, body: bytes) -> Verdict:
    sent, rewritten, strip, model = body, False, False, ""
    globs: list[str] = []
    for judge_ in part.judges:
        judged = judge_body(judge_.clause, judge_.call, sent)
        if judged.reason is not None:
            return Verdict(judged.reason, judged.model, tuple(globs))
        model = judged.model
        globs.append(judged.glob)
        strip = strip or judged.strip_usage
        if judged.body is not None:
            sent, rewritten = judged.body, True
    return Verdict(None, model, tuple(globs), sent if rewritten else None, strip)


@dataclass(frozen=True, slots=True)
class Charge:
    entry: str
    charges: tuple[tuple[str, Rate, int], ...]
    glob: str
    cost: int | None  # nano-USD; None: no price for the model


@dataclass(frozen=True, slots=True)
class Bill:
    model: str
    input: int
    output: int
    estimated: bool
    per_clause: tuple[Charge, ...]

    @property
    def cost(self) -> int | None:
        """The cost the entry's own clause gives (the first priced one)."""
        return next((c.cost for c in self.per_clause if c.cost is not None), None)

    def audit(self) -> dict[str, object]:
        fields: dict[str, object] = {
            "llm_model": self.model[:MODEL_SHOWN],  # what the sandbox chose: bounded, masked
            "llm_input_tokens": self.input,
            "llm_output_tokens": self.output,
        }
        if self.cost is not None:
            fields["llm_cost_usd"] = round(self.cost / 1e9, 9)
        if self.estimated:
            fields["llm_estimated"] = True
        return fields


def bill(
    part: LlmPart,
    verdict: Verdict,
    meter: Meter | None,
    sent: int,
    status: int = 200,
    reached: bool = True,
) -> Bill:
    """What the call spent: its usage, or an estimate when its answer has none (`meter`
    None: no answer came, only the request's bytes are estimated; nothing when the
    upstream was never `reached`). An error answer (`status` not 2xx) spends what it
    reports, else nothing: the API refused the call."""
    if meter is None and not reached:
        given_in, given_out, estimated = 0, 0, False
    elif meter is None:
        given_in, given_out, estimated = -(-sent // 4), 0, True
    elif not 200 <= status < 300 and not meter.final:
        given_in, given_out, estimated = 0, 0, False
    else:
        given_in, given_out, estimated = meter.settled(sent)
    found = []
    for judge_, glob in zip(part.judges, verdict.globs, strict=True):
        cost = cost_of(judge_.clause, verdict.model, given_in, given_out)
        spent = charges(judge_.clause, given_in + given_out, cost)
        found.append(Charge(judge_.entry, spent, glob, cost))
    return Bill(verdict.model, given_in, given_out, estimated, tuple(found))
