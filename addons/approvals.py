"""Approvals as a mitmproxy adapter (docs/configuration.md#approvals).

The stage addons call one function where their decision is `not_allowlisted`:
`connect` (addons/connect.py) and `request` (addons/request.py). Each asks the service
(`proxy.approvals.service`) once — granted, held until answered, or refused — and
returns the stage's answer: on a grant, the stage's decision again under `judge.granted`
(an entry naming just that host:port), so the address stage and a sandbox's node still
apply; otherwise the refusal (`approval_denied`, `approval_timeout`, `approval_limit`),
carrying the approval's id to the audit line.

A `once` grant of a CONNECT admits the tunnel it opens: the requests inside it are
judged under the same grant without asking again (`_tunnels`, forgotten when the client
disconnects). Requests to the reserved host `egress.invalid` are answered here, by the
proxy itself, once their body is read (`request` hook, `proxy.approvals.access`).
"""

from __future__ import annotations

import json

from mitmproxy import connection, http

from sandbox_egress.addons.shared import FLOW_KEY, FlowState, Shared
from sandbox_egress.proxy.approvals import access
from sandbox_egress.proxy.approvals.judge import grant_entry, granted, holdable
from sandbox_egress.proxy.approvals.service import Approvals, Verdict
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.hosts import Host, HostError, canonical_host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.resolver import Resolve
from sandbox_egress.proxy.stages import (
    ConnectAnswer,
    ConnectionFacts,
    RequestAnswer,
    RequestAsk,
    decide_connect,
    decide_request,
)
from sandbox_egress.proxy.targets import locate

ACCESS_KEY = "egress.access"  # flow.metadata: a request to egress.invalid, answered here
Tunnel = tuple[str, int, str, str]  # (host, port, approval id, scope) a CONNECT was granted


class ApprovalGate:
    """The adapter: one per proxy, reached as `shared.approvals`."""

    def __init__(self, shared: Shared, service: Approvals) -> None:
        self.shared = shared
        self.service = service
        self._tunnels: dict[str, Tunnel] = {}  # client connection id -> its granted target

    # -- the stages' one call -------------------------------------------------------------

    async def connect(
        self,
        client: connection.Client,
        policy: Policy,
        resolve: Resolve,
        facts: ConnectionFacts,
        answer: ConnectAnswer,
    ) -> ConnectAnswer:
        """A `not_allowlisted` CONNECT: held; on a grant, decided again under it."""
        host, port = _host(answer.host), answer.port
        if host is None or port is None or str(host) == access.RESERVED:
            return answer
        if not holdable(answer.decision) or not self.service.config.hold:
            return answer
        verdict = await self.service.judge((facts.sandbox, str(host), port), "CONNECT", None)
        if not verdict.granted or verdict.approval is None:
            return _refused_connect(answer, verdict, host, port)
        decided = await decide_connect(
            granted(policy, host, port, verdict.approval), resolve, facts, answer.host, port
        )
        if decided.pin is not None:
            self._tunnels[client.id] = (str(host), port, verdict.approval, verdict.scope or "")
        return decided

    async def request(
        self,
        flow: http.HTTPFlow,
        policy: Policy,
        resolve: Resolve,
        facts: ConnectionFacts,
        ask: RequestAsk,
        answer: RequestAnswer,
    ) -> RequestAnswer:
        """A `not_allowlisted` request: inside a granted tunnel, admitted under its grant;
        to `egress.invalid`, marked to be answered here; otherwise held like a CONNECT."""
        located = locate(ask.names)
        if isinstance(located, Reason) or not self.service.config.hold:
            return answer
        host, port = located.host, located.port
        if str(host) == access.RESERVED and answer.decision.reason is Reason.NOT_ALLOWLISTED:
            flow.metadata[ACCESS_KEY] = True  # the proxy's own: whatever a node allows (D489)
            return answer
        if not holdable(answer.decision):
            return answer
        tunnel = self._tunnels.get(flow.client_conn.id)
        if tunnel is not None and tunnel[:2] == (str(host), port):
            verdict = Verdict(Reason.ALLOWLISTED, tunnel[2], tunnel[3])
        else:
            method = ask.names.method
            path = flow.metadata[FLOW_KEY].path if FLOW_KEY in flow.metadata else None
            verdict = await self.service.judge((facts.sandbox, str(host), port), method, path)
        if not verdict.granted or verdict.approval is None:
            entry = grant_entry(host, port, verdict.approval) if verdict.approval else None
            return RequestAnswer(Decision.deny(verdict.reason, entry), answer.host)
        return await decide_request(
            granted(policy, host, port, verdict.approval), resolve, facts, ask
        )

    # -- mitmproxy hooks --------------------------------------------------------------------

    async def request_hook(self, flow: http.HTTPFlow) -> None:
        """A request to `egress.invalid` (refused `not_allowlisted` by the request stage,
        its body now read) gets the proxy's own answer instead."""
        if not flow.metadata.pop(ACCESS_KEY, False) or flow.error is not None:
            return
        shared = self.shared
        status, document = 500, {"error": "policy_error"}
        with shared.failclosed(Stage.REQUEST):
            sandbox = shared.facts(flow.client_conn).sandbox
            status, document = await access.answer(
                self.service,
                self.holdable,
                sandbox,
                flow.request.method,
                flow.request.path,
                flow.request.raw_content or b"",
            )
        flow.response = http.Response.make(
            status,
            json.dumps(document).encode() + b"\n",
            {"Content-Type": "application/json", "Cache-Control": "no-store"},
        )
        state = flow.metadata.get(FLOW_KEY)
        approval = document.get("id")
        if isinstance(state, FlowState) and isinstance(approval, str):
            host = canonical_host(access.RESERVED)
            state.decision = Decision.deny(Reason.NOT_ALLOWLISTED, grant_entry(host, 80, approval))

    def holdable(self, sandbox: str | None, host: Host, port: int) -> bool:
        """Whether the policy of `sandbox` would hold `host:port` (the name stage only)."""
        tenancy = self.shared.tenancy
        policy = self.shared.policy if tenancy is None else tenancy.policy(sandbox)
        return holdable(policy.decide(host, port, tls=None))

    def client_disconnected(self, client: connection.Client) -> None:
        self._tunnels.pop(client.id, None)


class ApprovalHooks:
    """The gate's mitmproxy hooks, as a sub-addon of `addons.egress` (after the request
    stage, so the access request's refusal is already there to be replaced)."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def request(self, flow: http.HTTPFlow) -> None:
        if self.shared.approvals is not None:
            await self.shared.approvals.request_hook(flow)

    def client_disconnected(self, client: connection.Client) -> None:
        if self.shared.approvals is not None:
            self.shared.approvals.client_disconnected(client)


def _host(text: str) -> Host | None:
    try:
        return canonical_host(text)
    except HostError:
        return None


def _refused_connect(
    answer: ConnectAnswer, verdict: Verdict, host: Host, port: int
) -> ConnectAnswer:
    entry = grant_entry(host, port, verdict.approval) if verdict.approval else None
    return ConnectAnswer(Decision.deny(verdict.reason, entry), answer.host, port, answer.facts)
