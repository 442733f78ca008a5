"""The request stage: decide every request, then refuse it or send it on, rewritten.

`requestheaders` turns the request into plain values, asks
`proxy.stages.decide_request` once, and applies the answer. An allow pins the checked
address, re-targets the request at its decided host in origin-form (so mitmproxy keys
connection reuse on it, and an upstream sees only the decided authority and SNI, D35)
and writes the transform headers, after removing what no upstream may receive
(`proxy.outbound`: hop-by-hop fields, spellings of an injected name, and the sandbox's
choice of compression when a value is injected). A refusal is the readable 403/502; when
its body is small it is read first (the connection stays), otherwise the answer goes at
once and the body is read and dropped, bounded (`addons.layers.linger`: lingering close, D350).
`request` drops a trailer block with bytes no upstream may see (D21).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons import mitm
from sandbox_egress.addons.clauses import ADAPTERS, Turn, budget, mcp
from sandbox_egress.addons.layers import linger
from sandbox_egress.addons.layers.limits import body_follows
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FLOW_KEY, FlowState, Shared, counter
from sandbox_egress.addons.targets import origin_form, request_names, upstream_sni
from sandbox_egress.proxy.audit.log import audit_path
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.fields import fields_problem
from sandbox_egress.proxy.limits import Limit
from sandbox_egress.proxy.outbound import outbound_fields
from sandbox_egress.proxy.stages import RequestAnswer, RequestAsk, decide_request
from sandbox_egress.proxy.values.redact import NO_REDACTION
from sandbox_egress.proxy.values.swap import held_in, secret_elsewhere

# mitmproxy reads a refused request's body before it can answer. Up to this size it does
# (the connection is kept alive); a larger or unknown-length body is answered at once and
# then read and dropped, bounded (`addons.layers.linger`, D350), never buffered.
REFUSED_BODY_LIMIT = 64 * 1024


class Requests:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        shared, request = self.shared, flow.request
        state = FlowState(Decision.deny(Reason.POLICY_ERROR), shared.masked(request.host[:255]))
        # As sent (before a swap writes a secret in it), a value the sandbox sent masked.
        state.path = audit_path(request.path, shared.held_values())
        flow.metadata[FLOW_KEY] = state
        turn = Turn(shared, flow, state, RequestAnswer(state.decision, state.host))
        with shared.failclosed(Stage.REQUEST):
            facts = shared.facts(flow.client_conn)
            ask = RequestAsk(
                method=request.data.method,
                fields=request.headers.fields,
                names=request_names(flow, facts),
                https=request.scheme == "https",
            )
            policy = shared.policy_for(flow.client_conn)
            resolve = shared.resolve_for(flow.client_conn)
            answer = await decide_request(policy, resolve, facts, ask)
            if answer.decision.reason is Reason.NOT_ALLOWLISTED and shared.approvals:  # issue 47
                answer = await shared.approvals.request(flow, policy, resolve, facts, ask, answer)
            fetched = shared.credentials.held()
            if secret_elsewhere(fetched, answer.decision, ask.fields, ask.names.path, answer.host):
                elsewhere = Decision.deny(Reason.SECRET_ELSEWHERE, answer.decision.entry)
                answer = RequestAnswer(elsewhere, answer.host)  # a fetched value, sent back
            state.host = shared.masked(answer.host)  # logged, audited, named in a refusal
            turn.answer, turn.body = answer, announced(flow)
            turn.late = functools.partial(self._judged_late, flow, state)
            if await self._walk(turn):
                return  # decided and counted once its body is read (`request`)
        shared.count(Stage.REQUEST, state.decision)
        if state.decision.allowed:
            self._stream(flow, state, turn.reserved)
            sandbox = shared.facts(flow.client_conn).sandbox
            budget.websocket_upgrade(shared.state, shared.metrics, flow, state, sandbox)
            return
        state.injected, state.redactions = (), NO_REDACTION  # nothing was sent
        state.refused_here = True
        flow.request.stream = False
        response = refusal_response(state.decision, state.host, flow.request.method)
        if turn.retry_after_s:
            response.headers["Retry-After"] = str(turn.retry_after_s)
        if unread(flow):
            shared.metrics.limit_refusals.labels(Limit.REFUSED_BODY.value).inc()
            linger.answer_early(flow, response)  # answered now, the body dropped (D350)
        else:
            flow.response = response

    async def _walk(self, turn: Turn) -> bool:
        """The clauses' adapters after the one decision (`addons.clauses.ADAPTERS`): admit,
        apply, write, hold. `state.decision` is set only once applied (an exception
        refuses); True when a body is held and the request is decided later."""
        state = turn.state
        for adapter in ADAPTERS:  # before anything is written: budgets
            refused = await adapter.admit(turn) if turn.answer.decision.allowed else None
            if refused is not None:
                turn.answer = RequestAnswer(refused, turn.answer.host)
        self._apply(turn.flow, state, turn.answer)
        for adapter in ADAPTERS:  # once applied: credentials written, then signed
            refused = await adapter.write(turn) if turn.answer.decision.allowed else None
            if refused is not None:
                turn.answer = RequestAnswer(refused, turn.answer.host)
        state.decision = turn.answer.decision
        holding: list[str] = []
        for adapter in ADAPTERS:  # a body read before it goes on
            if not state.decision.allowed:
                break
            held = adapter.hold(turn)
            if isinstance(held, Decision):
                state.decision = held
                for name in holding:  # refused before it is read: nothing judges it
                    state.parts.pop(name, None)
            elif held:
                holding.append(adapter.clause)
        return bool(holding) and state.decision.allowed

    def _apply(self, flow: http.HTTPFlow, state: FlowState, answer: RequestAnswer) -> None:
        request, location = flow.request, answer.location
        if answer.pin is None or location is None:
            return  # refused
        self.shared.pin(flow.client_conn, answer.pin)
        # From here mitmproxy connects to (host, port) — the pinned address in server_connect —
        # and keys connection reuse on it, so each host gets its own upstream connection.
        request.data.host, request.data.port = answer.pin.destination
        if answer.fields is not None:  # placeholders swapped (proxy.swap), before Host is set
            request.headers.fields = answer.fields
        origin_form(request, location)
        upstream_sni(flow, location)
        injected = tuple(t.header for t in answer.transforms)
        binding = answer.decision.entry.credential if answer.decision.entry else None
        if answer.credentials and binding is not None and binding.header_name():
            injected += (str(binding.header_name()),)  # its spellings go too (issue 32)
        websocket = request.headers.get("upgrade", "").lower() == "websocket"
        carries = bool(answer.transforms or answer.swapped or answer.credentials or answer.sigv4)
        request.headers.fields = outbound_fields(
            request.headers.fields, injected, websocket, carries_secret=carries
        )
        if carries:
            for transform in answer.transforms:
                if not transform.value.deferred:  # a credential's: written once fetched
                    request.headers[transform.header] = transform.value.reveal()
            written = (*answer.swapped, *(t.header for t in answer.transforms))
            state.injected = tuple(dict.fromkeys(written))
            state.redactions = answer.redactions
            self.shared.metrics.injections.labels(answer.decision.rule).inc()

    def _stream(self, flow: http.HTTPFlow, state: FlowState, reserved: int = 0) -> None:
        """The allowed request's body streams on, counted and metered (budgets; `reserved`:
        bytes its admission already spent)."""
        shared, count = self.shared, counter(state, "bytes_sent")
        sandbox = shared.facts(flow.client_conn).sandbox
        flow.request.stream = budget.metered(
            shared.state, shared.metrics, flow, state, count, sandbox, reserved
        )

    def _judged_late(
        self, flow: http.HTTPFlow, state: FlowState, judge: Callable[[Decision], Decision]
    ) -> bool:
        """A body judged while it streams (a git push's command list, `addons.layers.pushgate`):
        True when it streams on (spent from the upload budget like any body), False when
        refused (`flow.response` answers it once its body has been read and dropped)."""
        decided, state.decision = state.decision, Decision.deny(Reason.POLICY_ERROR)
        with self.shared.failclosed(Stage.REQUEST):
            state.decision = judge(decided)
        self.shared.count(Stage.REQUEST, state.decision)
        if state.decision.allowed:
            self._stream(flow, state)
            return True
        state.injected, state.redactions = (), NO_REDACTION
        state.refused_here = True
        if flow.response is None:
            flow.response = refusal_response(state.decision, state.host, flow.request.method)
        return False

    def request(self, flow: http.HTTPFlow) -> None:
        """A held body is judged by each adapter that holds it, in table order (a SigV4
        body hashed and signed before it is judged as MCP or as a git push's command list,
        D424), then searched for resolved values (D364), and the request counted once.
        Request trailers arrive after the body streamed, too late for a refusal: a
        trailer block with bytes no upstream may see, or a resolved value (D524), is
        dropped, never forwarded (D21)."""
        state = flow.metadata.get(FLOW_KEY)
        if isinstance(state, FlowState) and state.parts:
            turn = Turn.later(self.shared, flow, state)
            judged = False
            for adapter in ADAPTERS:
                if not state.decision.allowed or not adapter.holds(turn):
                    continue
                judged = True
                decided, state.decision = state.decision, Decision.deny(Reason.POLICY_ERROR)
                with self.shared.failclosed(Stage.REQUEST):
                    verdict = adapter.judge(turn, decided)
                    state.decision = self._body_searched(flow, verdict)
                    if not state.decision.allowed and flow.response is None and not flow.error:
                        flow.response = refusal_response(
                            state.decision, state.host, flow.request.method
                        )
            if judged:
                self._judged(flow, state)
        trailers = flow.request.trailers
        if trailers is not None and (
            fields_problem(trailers.fields) is not None
            or held_in(
                self.shared.held_values(), b"\n".join(b"%s: %s" % f for f in trailers.fields)
            )
        ):
            flow.request.trailers = None  # a resolved value too (D524)

    def _body_searched(self, flow: http.HTTPFlow, decision: Decision) -> Decision:
        """An allowed request whose body the proxy read (held to sign, or judged as MCP)
        is refused `secret_elsewhere` when the body holds a resolved value in any
        spelling (D364), as its headers and target would be."""
        body = flow.request.raw_content
        if decision.allowed and body and held_in(self.shared.held_values(), body):
            return Decision.deny(Reason.SECRET_ELSEWHERE, decision.entry)
        return decision

    def _judged(self, flow: http.HTTPFlow, state: FlowState) -> None:
        """A held request decided on its body: counted; refused, nothing of it goes on."""
        self.shared.count(Stage.REQUEST, state.decision)
        if not state.decision.allowed:
            state.injected, state.redactions = (), NO_REDACTION
            state.refused_here = True
            if flow.response is None and flow.error is None:
                mitm.kill(flow)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """A message on a WebSocket of an MCP entry is judged (`addons.clauses.mcp`); one the
        sandbox sends counts toward the upload budget."""
        judged = False
        with self.shared.failclosed(Stage.REQUEST):
            mcp.websocket_message(flow, self.shared.metrics)  # each judged (D332)
            budget.websocket_message(flow)
            judged = True
        if not judged and flow.websocket is not None and flow.websocket.messages:
            flow.websocket.messages[-1].drop()  # type: ignore[no-untyped-call]  # fail closed


def announced(flow: http.HTTPFlow) -> int | None:
    """The request body's announced size for a budget: 0 without a body, None unknown."""
    if not body_follows(flow):
        return 0
    size = body_size(flow.request, True)
    return (
        None if size > REFUSED_BODY_LIMIT and "content-length" not in flow.request.headers else size
    )


def unread(flow: http.HTTPFlow) -> bool:
    """Whether a refusal is answered before the body is read (`addons.layers.linger`): a body
    over `REFUSED_BODY_LIMIT` or of unknown size, or one the client waits to be asked
    for (`Expect: 100-continue`)."""
    follows = body_follows(flow)
    if body_size(flow.request, follows) > REFUSED_BODY_LIMIT:
        return True
    return follows and flow.request.headers.get("expect", "").lower() == "100-continue"


def body_size(request: http.Request, follows: bool) -> int:
    """The request body's announced size; unknown counts as unbounded: chunked, invalid,
    or an HTTP/2 stream its head left open without a content-length (D25)."""
    if not follows:
        return 0
    if (request.is_http2 or request.is_http3) and "content-length" not in request.headers:
        return REFUSED_BODY_LIMIT + 1
    try:
        size = expected_http_body_size(request)
    except ValueError:
        return REFUSED_BODY_LIMIT + 1
    return REFUSED_BODY_LIMIT + 1 if size is None or size < 0 else size
