"""The credentials stage of a request (issue 32; docs/configuration.md#credentials): the
last one before a request goes upstream, after rules, budgets and held bodies.

`write` awaits every credential the decided answer names (`RequestAnswer.credentials`)
from the cache (`Shared.credentials`, proxy/credentials/cache.py: fetched off the event
loop, once in flight), writes them into the request (the pure
`proxy.credentials.writing.write`) and widens what the response redacts. Without a value
the request is refused `credential_unavailable` (502): nothing of it goes upstream.
"""

from __future__ import annotations

from mitmproxy import http

from sandbox_egress.addons.clauses.base import Adapter, Turn
from sandbox_egress.addons.shared import FlowState, Shared
from sandbox_egress.proxy.credentials.base import CredentialUnavailable, Fetched
from sandbox_egress.proxy.credentials.writing import write as written
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.stages import RequestAnswer


async def write(
    shared: Shared, flow: http.HTTPFlow, state: FlowState, answer: RequestAnswer
) -> Decision | None:
    """Write the answer's credentials into the request; a refusal when one is missing."""
    decision = answer.decision
    if not answer.credentials or not decision.allowed or answer.location is None:
        return None
    values: dict[str, Fetched] = {}
    state.credentials = answer.credentials
    for name in answer.credentials:
        try:
            values[name] = await shared.credentials.get(name)
        except CredentialUnavailable:
            return Decision.deny(Reason.CREDENTIAL_UNAVAILABLE, decision.entry)
    request = flow.request
    plan = written(decision, request.headers.fields, request.path, values)
    request.headers.fields = plan.fields
    request.path = plan.path
    state.injected = tuple(dict.fromkeys((*state.injected, *plan.injected)))
    state.redactions = plan.redactions.spelled(state.redactions.secrets)  # and the swap's
    return None


class CredentialsAdapter(Adapter):
    """The `credentials` clause: what the answer names is fetched and written once the
    request is applied, before it is signed."""

    clause = "credentials"

    async def write(self, turn: Turn) -> Decision | None:
        return await write(turn.shared, turn.flow, turn.state, turn.answer)
