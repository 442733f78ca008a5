"""The `llm` clause's adapter (docs/configuration.md#model-apis, issue 46): a model API
call's budgets checked before anything is sent, its body held and judged (model, output
cap, the usage chunk asked for), its answer metered as it streams, its spending charged.

* `admit`: each judging clause's budgets (`proxy.llm.spending`) asked once in the state
  backend; spent: `llm_budget_exceeded` (429, Retry-After); a store that did not answer
  with `on_error: deny`: `budget_unavailable` (503).
* `hold`: the body is read whole before it goes on — announced, at most mitmproxy's
  buffering bound, not compressed — else `llm_bad_request` (D463). The answer is asked
  for uncompressed (`Accept-Encoding: identity`) so its usage can be read.
* `judge`: `proxy.llm.call.judge`; a rewritten body is sent with its new length.
* `answer`: the response's stream function wrapped with the usage meter
  (`proxy.llm.streams.Meter`); the end of the answer settles the call.
* `finish` (the flow is done, answered or failed): a call not settled yet is settled —
  charged an estimate (D465).

Settling charges every clause's budgets under its entry (one task, owned by this module
until done), counts the metrics by api and glob, and adds the audit fields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sandbox_egress.addons.clauses.base import Adapter, Stream, Turn, holdable
from sandbox_egress.proxy.clauses.budget import BudgetKey
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.llm import Api
from sandbox_egress.proxy.llm.call import Verdict, bill, judge
from sandbox_egress.proxy.llm.part import LlmPart
from sandbox_egress.proxy.llm.spending import key_of, rates
from sandbox_egress.proxy.llm.streams import Meter

_tasks: set[asyncio.Task[None]] = set()  # charges in flight, held until done


@dataclass
class LlmCall:
    """One call's state (`FlowState.parts["llm"]`)."""

    part: LlmPart
    keys: tuple[BudgetKey, ...]  # per judge: where its spending is kept
    held: bool = False
    verdict: Verdict | None = None
    meter: Meter | None = None
    status: int = 0
    sent: int = 0  # the body's bytes as sent upstream
    settled: bool = False


def _call(turn: Turn) -> LlmCall | None:
    found = turn.state.parts.get("llm")
    return found if isinstance(found, LlmCall) else None


def _client(turn: Turn) -> str:
    peer = turn.flow.client_conn.peername
    return str(peer[0]) if peer else "unknown"


class LlmAdapter(Adapter):
    clause = "llm"

    async def admit(self, turn: Turn) -> Decision | None:
        part = turn.answer.parts.get("llm")
        if not isinstance(part, LlmPart):
            return None
        shared, decision = turn.shared, turn.answer.decision
        sandbox = shared.facts(turn.flow.client_conn).sandbox
        keys = tuple(key_of(sandbox, _client(turn), j.entry) for j in part.judges)
        for judged, key in zip(part.judges, keys, strict=True):
            budgets = rates(judged.clause)
            if not budgets:
                continue
            admission = await shared.state.admit_spending(key, budgets)
            if admission.unavailable:
                return Decision.deny(Reason.BUDGET_UNAVAILABLE, decision.entry, "llm")
            if not admission.admitted:
                turn.retry_after_s = admission.retry_after_s
                return Decision.deny(Reason.LLM_BUDGET_EXCEEDED, decision.entry, "llm")
        turn.state.parts["llm"] = LlmCall(part, keys)
        return None

    def hold(self, turn: Turn) -> Decision | bool:
        call = _call(turn)
        if call is None:
            return False
        request = turn.flow.request
        request.headers["accept-encoding"] = "identity"  # an answer whose usage is readable
        if not holdable(request):
            return Decision.deny(Reason.LLM_BAD_REQUEST, turn.state.decision.entry, "llm")
        request.stream = False
        call.held = True
        return True

    def holds(self, turn: Turn) -> bool:
        call = _call(turn)
        return call is not None and call.held and call.verdict is None

    def judge(self, turn: Turn, decided: Decision) -> Decision:
        call = _call(turn)
        if call is None:
            raise ValueError("judge without a held model API call")
        request = turn.flow.request
        body = request.raw_content or b""
        call.verdict = verdict = judge(call.part, body)
        if verdict.reason is not None:
            call.settled = True  # refused: nothing was sent, nothing is charged
            return Decision.deny(verdict.reason, decided.entry, "llm")
        if verdict.body is not None:
            request.raw_content = verdict.body
            request.headers["content-length"] = str(len(verdict.body))
        call.sent = len(request.raw_content or b"")
        turn.state.bytes_sent = call.sent
        return decided

    def answer(self, turn: Turn, stream: Stream) -> Stream:
        call, response = _call(turn), turn.flow.response
        if call is None or call.verdict is None or response is None:
            return stream
        strip = call.verdict.strip
        meter = Meter(Api(call.part.api), response.headers.get("content-type", ""), strip)
        call.meter, call.status = meter, response.status_code
        if strip and meter.strip:  # the usage chunk is left out: the length changes
            response.headers.pop("content-length", None)
            if not (response.is_http2 or response.is_http3):
                response.headers["transfer-encoding"] = "chunked"

        def metered(chunk: bytes) -> list[bytes]:
            data = stream(chunk)
            data = data if isinstance(data, bytes) else b"".join(data)
            out = meter.feed(data) if data else b""
            if not chunk:  # the end of the answer
                out += meter.close()
                self.settle(turn, call)
            return [out] if out else []

        return metered

    def finish(self, turn: Turn) -> None:
        call = _call(turn)
        if call is not None and call.verdict is not None:
            self.settle(turn, call)

    def settle(self, turn: Turn, call: LlmCall) -> None:
        """Charge the call once: its usage, or an estimate (D465)."""
        if call.settled or call.verdict is None:
            return
        call.settled = True
        reached = turn.flow.server_conn.timestamp_tcp_setup is not None
        spent = bill(call.part, call.verdict, call.meter, call.sent, call.status or 200, reached)
        metrics, state, own = turn.shared.metrics.llm, turn.shared.state, spent.per_clause[0]
        tokens = (spent.input, spent.output)  # counted once, by the entry's own clause's glob
        metrics.charged(call.part.api, own.glob, tokens, own.cost, spent.estimated)
        turn.state.audit.update(spent.audit())
        owed = [
            (k, c.charges) for k, c in zip(call.keys, spent.per_clause, strict=True) if c.charges
        ]
        if owed:
            _schedule(_charge(state, owed))


async def _charge(state: Any, owed: list[tuple[BudgetKey, Any]]) -> None:
    for key, charges in owed:
        await state.charge(key, charges)


def _schedule(work: Any) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
