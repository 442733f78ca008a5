"""The git push gate (docs/configuration.md#git-over-https): a receive-pack POST
allowed by repository is held until
its command list is judged, so no byte of a refused push goes upstream.

`hold` (from the request stage) buffers the body instead of streaming it: only a body
of announced size up to `PUSH_BODY_LIMIT` (mitmproxy's own buffering bound, so it never
switches to streaming behind the gate) and without `Content-Encoding`; anything else is
refused there (docs/decisions.md D106). `judge` (the `request` hook, the whole body
read) parses the commands (`proxy.gitpush`) and either lets the push go or answers with
git's report-status, every ref `ng` with the policy's reason, which `git push` prints.
"""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.net.http.http1.read import expected_http_body_size

from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.gitpush import PushItem, judge_pushes, read_commands, report_status
from sandbox_egress.proxy.limits import STREAM_BODIES_OVER

PUSH_BODY_LIMIT = 1024 * 1024
if STREAM_BODIES_OVER != "1m":  # the bound above is mitmproxy's, written as bytes
    raise ImportError("addons.gitpush: PUSH_BODY_LIMIT must follow STREAM_BODIES_OVER")


def hold(request: http.Request, state: FlowState, *items: PushItem) -> Decision | None:
    """Buffer the push's body for `judge` (its command list must match every item), or the
    refusal when it cannot be buffered."""
    refused = Decision.deny(Reason.GIT_PUSH_DENIED, state.decision.entry, state.decision.clause)
    if "content-encoding" in request.headers:
        return refused  # a compressed command list is never inflated here
    try:
        size = expected_http_body_size(request)
    except ValueError:
        return refused
    if "content-length" not in request.headers or size is None or size > PUSH_BODY_LIMIT:
        return refused
    request.stream = False
    state.push = items
    return None


def judge(flow: http.HTTPFlow, state: FlowState, decision: Decision) -> Decision:
    """The held push: allowed as `decision` says, or refused with git's report-status."""
    items, state.push = state.push, ()
    body = flow.request.raw_content or b""
    commands = read_commands(body) if items else "no push item"
    if isinstance(commands, str):  # malformed: no report-status can name its refs
        refused = Decision.deny(Reason.GIT_PUSH_DENIED, decision.entry, decision.clause)
        flow.response = refusal_response(refused, state.host, flow.request.method)
        return refused
    reasons = judge_pushes(items, commands)
    if not any(reasons):
        state.bytes_sent = len(body)
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
