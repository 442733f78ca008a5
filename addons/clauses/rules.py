"""The git push gate (docs/configuration.md#git-over-https): a receive-pack POST allowed
by repository is held until its command list is judged, so no byte of a refused push
goes upstream, and a push of any size is judged (docs/decisions.md D180).

`hold` (from the request stage) hands the body to `addons.layers.pushgate`, which feeds its
first bytes, chunked or sized, to the pure reader and calls back with the command list;
a body with `Content-Encoding` (a compressed command list is never inflated here) or an
invalid length is refused there. `judge` (the callback) decides the commands
(`proxy.clauses.git`) and either lets the push go on, streamed and metered, or answers with
git's report-status, every ref `ng` with the policy's reason, which `git push` prints.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons import mitm
from sandbox_egress.addons.clauses.base import Adapter, Turn
from sandbox_egress.addons.layers import pushgate
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.clauses.git import (
    CommandReader,
    Commands,
    PushItem,
    judge_pushes,
    report_status,
)
from sandbox_egress.proxy.decision import Decision, Reason


def hold(
    flow: http.HTTPFlow,
    state: FlowState,
    judged: Callable[[Commands | str], bool],
    *items: PushItem,
) -> Decision | None:
    """Hold the push's body until `judged` (its command list must match every item), or
    the refusal when it cannot be held."""
    request = flow.request
    refused = Decision.deny(Reason.GIT_PUSH_DENIED, state.decision.entry, state.decision.clause)
    if "content-encoding" in request.headers:
        return refused  # a compressed command list is never inflated here
    try:
        expected_http_body_size(request)
    except ValueError:
        return refused
    if not pushgate.hold(flow, judged):
        return Decision.deny(Reason.POLICY_ERROR, state.decision.entry, state.decision.clause)
    state.push = items
    return None


def judge(
    flow: http.HTTPFlow, state: FlowState, decision: Decision, commands: Commands | str
) -> Decision:
    """The held push: allowed as `decision` says, or refused with git's report-status (the
    JSON 403 when the command list is malformed: no report-status can name its refs)."""
    items, state.push = state.push, ()
    if not items:
        commands = "no push item"
    if isinstance(commands, str):
        refused = Decision.deny(Reason.GIT_PUSH_DENIED, decision.entry, decision.clause)
        flow.response = refusal_response(refused, state.host, flow.request.method)
        return refused
    reasons = judge_pushes(items, commands)
    if not any(reasons):
        return decision
    flow.response = http.Response.make(
        200,
        report_status(commands, reasons),
        {
            "Content-Type": "application/x-git-receive-pack-result",
            "Cache-Control": "no-cache",
            "X-Egress-Denied": Reason.GIT_PUSH_DENIED.value,
        },
    )
    return Decision.deny(Reason.GIT_PUSH_DENIED, decision.entry, decision.clause)


class RulesAdapter(Adapter):
    """The `rules` clause: a git push allowed by repository is held until its command
    list is judged — as its body streams (`addons.layers.pushgate`), or, when another clause
    already holds the whole body (SigV4 hashes it first), from that body in `judge`."""

    clause = "rules"

    def hold(self, turn: Turn) -> Decision | bool:
        items, flow, state = turn.answer.push, turn.flow, turn.state
        if not items:
            return False
        if turn.held:  # read whole by another clause: judged from it in `request`
            state.push = items
            return True
        late = turn.late
        if late is None:
            raise ValueError("a push held without the request stage's end")
        decided = state.decision

        def judged(commands: Commands | str) -> bool:
            return late(lambda _: judge(flow, state, decided, commands))

        refused = hold(flow, state, judged, *items)
        return True if refused is None else refused

    def holds(self, turn: Turn) -> bool:
        return bool(turn.state.push)

    def judge(self, turn: Turn, decided: Decision) -> Decision:
        flow, state = turn.flow, turn.state
        if pushgate.GATE in flow.metadata:  # the gate never had its command list: refused
            state.push = ()
            if flow.error is None:
                mitm.kill(flow)
            return Decision.deny(Reason.POLICY_ERROR, decided.entry, decided.clause)
        reader = CommandReader()
        return judge(flow, state, decided, reader.feed(flow.request.raw_content or b"", True) or "")
