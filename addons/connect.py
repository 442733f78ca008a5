"""The CONNECT stage (regular mode): decide the tunnel's target before it opens.

Turns the CONNECT into plain values, asks `proxy.stages.decide_connect` once, and
applies the answer: a refusal is the 403 (no tunnel), an allow records the target every
request inside must name and pins the checked address the tunnel connects to.
"""

from __future__ import annotations

import time

from mitmproxy import http

from sandbox_egress.addons.auditing import Where, address_text
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import Shared
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.stages import ConnectAnswer, decide_connect


class Connect:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        shared, client, request = self.shared, flow.client_conn, flow.request
        started = time.monotonic()
        facts = shared.facts(client)
        answer = ConnectAnswer(
            Decision.deny(Reason.POLICY_ERROR), request.host[:255], request.port, facts
        )
        with shared.failclosed(Stage.CONNECT):
            decided = await decide_connect(
                shared.policy_for(client),
                shared.resolve_for(client),
                facts,
                request.host,
                request.port,
            )
            if decided.decision.reason is Reason.NOT_ALLOWLISTED and shared.approvals:  # issue 47
                decided = await shared.approvals.connect(
                    client, shared.policy_for(client), shared.resolve_for(client), facts, decided
                )
            if decided.pin is not None:
                shared.pin(client, decided.pin)
                shared.learned(client, decided.facts)
                # The tunnel's upstream as mitmproxy will connect to it: the canonical
                # name, which is what the pin is keyed on.
                request.data.host = decided.pin.destination[0]
            answer = decided  # only once applied: an exception leaves the refusal
        decision = answer.decision
        shared.count(Stage.CONNECT, decision)
        host = shared.masked(answer.host)  # what the sandbox chose: no value in it (D363)
        if not decision.allowed:
            flow.response = refusal_response(decision, host)
        status = flow.response.status_code if flow.response else 200
        upstream = address_text(answer.pin.address) if answer.pin is not None else None
        where = Where(client, "CONNECT", "", host, answer.port, upstream)
        shared.write_audit(where, decision, started, status)
