"""The request stage: decide every request, then refuse it or send it on, rewritten.

`requestheaders` turns the request into plain values, asks
`proxy.stages.decide_request` once, and applies the answer. An allow pins the checked
address, re-targets the request at its decided host in origin-form (so mitmproxy keys
connection reuse on it, and an upstream sees only the decided authority and SNI, D35)
and writes the transform headers, after removing what no upstream may receive
(`proxy.outbound`: hop-by-hop fields, spellings of an injected name, and the sandbox's
choice of compression when a value is injected). A refusal is the readable 403/502; when
its body is small it is read first (the connection stays), otherwise the answer goes at
once and the body is read and dropped, bounded (`addons.linger`: lingering close, D350).
`request` drops a trailer block with bytes no upstream may see (D21).
"""

from __future__ import annotations

import functools

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons import budget, credentials, gitpush, linger, mcp, mitm, sigv4
from sandbox_egress.addons.limits import body_follows
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FLOW_KEY, FlowState, Shared, counter
from sandbox_egress.addons.targets import origin_form, request_names, upstream_sni
from sandbox_egress.proxy.audit.log import audit_path
from sandbox_egress.proxy.clauses.budget import Admission
from sandbox_egress.proxy.clauses.git import Commands
from sandbox_egress.proxy.clauses.sigv4 import Held
from sandbox_egress.proxy.decision import Decision, Reason, Stage
from sandbox_egress.proxy.fields import fields_problem
from sandbox_egress.proxy.limits import Limit
from sandbox_egress.proxy.outbound import outbound_fields
from sandbox_egress.proxy.stages import RequestAnswer, RequestAsk, decide_request
from sandbox_egress.proxy.values.redact import NO_REDACTION
from sandbox_egress.proxy.values.swap import held_in, secret_elsewhere

# mitmproxy reads a refused request's body before it can answer. Up to this size it does
# (the connection is kept alive); a larger or unknown-length body is answered at once and
# then read and dropped, bounded (`addons.linger`, D350), never buffered.
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
        admission = Admission(True)
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
            fetched = shared.credentials.held()
            if secret_elsewhere(fetched, answer.decision, ask.fields, ask.names.path, answer.host):
                elsewhere = Decision.deny(Reason.SECRET_ELSEWHERE, answer.decision.entry)
                answer = RequestAnswer(elsewhere, answer.host)  # a fetched value, sent back
            state.host = shared.masked(answer.host)  # logged, audited, named in a refusal
            decided, admission = await budget.admit(
                shared.state, shared.metrics, answer.decision, announced(flow), facts.sandbox
            )
            if not decided.allowed:
                answer = RequestAnswer(decided, answer.host)
            self._apply(flow, state, answer)
            refused = await credentials.write(shared, flow, state, answer)  # last (issue 32)
            if refused is not None:
                answer = RequestAnswer(refused, answer.host)
            if answer.sigv4 is not None and answer.decision.allowed:  # last: re-signed
                signed = await sigv4.start(
                    shared, flow, state, answer.decision, answer.sigv4, announced(flow)
                )
                state.sigv4 = signed if isinstance(signed, Held) else None
                answer = (
                    answer
                    if not isinstance(signed, Decision)
                    else RequestAnswer(signed, answer.host)
                )
            state.decision = answer.decision  # only once applied: an exception refuses
            if state.sigv4 is not None and answer.mcp:  # the body SigV4 holds is MCP (D424)
                refused, _ = mcp.start(flow, state, answer.mcp)
                if refused is not None:
                    state.decision, state.sigv4 = refused, None  # refused before it is read
            if state.sigv4 is not None:
                return  # decided and counted once its body is hashed and signed (`request`)
            if answer.push and state.decision.allowed:
                judged = functools.partial(self._push_judged, flow, state)
                held = gitpush.hold(flow, state, judged, *answer.push)
                state.decision = held or state.decision
                if held is None:
                    return  # decided and counted once its command list is read
            if answer.mcp and state.decision.allowed:
                refused, holding = mcp.start(flow, state, answer.mcp)
                state.decision = refused or state.decision
                if holding:
                    return  # decided and counted once its body is read (`request`)
        shared.count(Stage.REQUEST, state.decision)
        if state.decision.allowed:
            self._stream(flow, state, admission.reserved)
            sandbox = shared.facts(flow.client_conn).sandbox
            budget.websocket_upgrade(shared.state, shared.metrics, flow, state, sandbox)
            return
        state.injected, state.redactions = (), NO_REDACTION  # nothing was sent
        state.refused_here = True
        flow.request.stream = False
        response = refusal_response(state.decision, state.host, flow.request.method)
        if admission.retry_after_s:
            response.headers["Retry-After"] = str(admission.retry_after_s)
        if unread(flow):
            shared.metrics.limit_refusals.labels(Limit.REFUSED_BODY.value).inc()
            linger.answer_early(flow, response)  # answered now, the body dropped (D350)
        else:
            flow.response = response

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

    def _push_judged(self, flow: http.HTTPFlow, state: FlowState, commands: Commands | str) -> bool:
        """A held git push's command list, read by `addons.pushgate`: True when the push
        streams on (spent from the upload budget like any body), False when refused
        (`flow.response` answers it once its body has been read and dropped)."""
        decided, state.decision = state.decision, Decision.deny(Reason.POLICY_ERROR)
        with self.shared.failclosed(Stage.REQUEST):
            state.decision = gitpush.judge(flow, state, decided, commands)
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
        """A held SigV4 body is hashed and signed (`addons.sigv4`), a held MCP POST judged
        on its messages (`addons.mcp`), both for an MCP server behind SigV4 (D424). Request
        trailers arrive after the body streamed, too late for a refusal: a trailer block
        with bytes no upstream may see is dropped, never forwarded (D21). A git push still
        held here was never judged (`addons.pushgate` reads every held body): it is
        refused."""
        state = flow.metadata.get(FLOW_KEY)
        if isinstance(state, FlowState) and state.sigv4 is not None:
            held, state.sigv4 = state.sigv4, None
            decided, state.decision = state.decision, Decision.deny(Reason.POLICY_ERROR)
            with self.shared.failclosed(Stage.REQUEST):
                state.decision = self._body_searched(flow, sigv4.finish(flow, held, decided))
                if not state.decision.allowed:
                    flow.response = refusal_response(
                        state.decision, state.host, flow.request.method
                    )
                else:
                    state.bytes_sent = len(flow.request.raw_content or b"")  # held, not streamed
            if state.mcp is not None and state.mcp.held and not state.decision.allowed:
                state.mcp.held = False  # refused unsigned: not judged as MCP too
            if state.mcp is None or not state.mcp.held:
                self._judged(flow, state)  # else counted once judged as MCP below (D424)
        if isinstance(state, FlowState) and state.push:
            state.push, state.decision = (), Decision.deny(Reason.POLICY_ERROR)
            self.shared.count(Stage.REQUEST, state.decision)
            state.injected, state.redactions = (), NO_REDACTION
            state.refused_here = True
            if flow.error is None:
                mitm.kill(flow)
        elif (
            isinstance(state, FlowState) and state.mcp and state.mcp.held and not state.mcp.verdict
        ):
            decided, state.decision = state.decision, Decision.deny(Reason.POLICY_ERROR)
            with self.shared.failclosed(Stage.REQUEST):
                state.decision = mcp.judge(flow, state, decided, self.shared.metrics)
                judged, state.decision = state.decision, self._body_searched(flow, state.decision)
                if judged.allowed and not state.decision.allowed:
                    flow.response = refusal_response(
                        state.decision, state.host, flow.request.method
                    )
            self._judged(flow, state)
        trailers = flow.request.trailers
        if trailers is not None and fields_problem(trailers.fields) is not None:
            flow.request.trailers = None

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
        """A message on a WebSocket of an MCP entry is judged (`addons.mcp`); one the
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
    """Whether a refusal is answered before the body is read (`addons.linger`): a body
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
