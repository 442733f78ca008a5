"""The git push gate's adapter (addons/gitpush.py) on mitmproxy test flows: what it holds,
what it refuses before reading, and the report-status it answers with."""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.test import tflow

from sandbox_egress.addons import gitpush
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.config import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.gitpush import pkt

CONFIG = parse(
    {"network": {"allowlist": [{"domain": "git.example", "git": {"push": [
        {"repo": "acme/web", "refs": ["refs/heads/agent/**"]}]}}]}},
    "env.yaml",
    {},
)  # fmt: skip
ENTRY = CONFIG.allowlist[0]
assert ENTRY.git is not None
ITEM = ENTRY.git.push[0]
ALLOWED = Decision(True, Reason.ALLOWLISTED, ENTRY, clause="git.push[0]")


def push(body: bytes, **headers: str) -> tuple[http.HTTPFlow, FlowState]:
    flow = tflow.tflow()
    flow.request.method = "POST"
    flow.request.path = "/acme/web.git/git-receive-pack"
    flow.request.headers.clear()
    flow.request.headers["Content-Length"] = str(len(body))
    for name, value in headers.items():
        flow.request.headers[name] = value
    flow.request.raw_content = body
    return flow, FlowState(ALLOWED, "git.example")


def commands(ref: str) -> bytes:
    return pkt(f"{'a' * 40} {'b' * 40} {ref}\0report-status\n".encode()) + b"0000PACK"


def test_a_small_push_is_held_then_let_through_when_every_ref_is_allowed() -> None:
    flow, state = push(commands("refs/heads/agent/x"))
    assert gitpush.hold(flow.request, state, ITEM) is None
    assert flow.request.stream is False and state.push == (ITEM,)
    assert gitpush.judge(flow, state, ALLOWED) is ALLOWED
    assert flow.response is None and state.bytes_sent == len(flow.request.raw_content or b"")


def test_a_refused_ref_gets_report_status_and_nothing_goes_on() -> None:
    flow, state = push(commands("refs/heads/main"))
    assert gitpush.hold(flow.request, state, ITEM) is None
    decision = gitpush.judge(flow, state, ALLOWED)
    assert (decision.allowed, decision.reason, decision.clause) == (
        False, Reason.GIT_PUSH_DENIED, "git.push[0]")  # fmt: skip
    assert flow.response is not None and flow.response.status_code == 200
    assert flow.response.headers["X-Egress-Denied"] == "git_push_denied"
    assert b"ng refs/heads/main egress policy: this ref may not be pushed" in (
        flow.response.content or b""
    )


def test_a_malformed_list_is_a_readable_refusal() -> None:
    flow, state = push(b"garbage")
    assert gitpush.hold(flow.request, state, ITEM) is None
    decision = gitpush.judge(flow, state, ALLOWED)
    assert decision.reason is Reason.GIT_PUSH_DENIED
    assert flow.response is not None and flow.response.status_code == 403


def test_what_cannot_be_buffered_is_refused_before_reading() -> None:
    compressed, state = push(b"x", **{"Content-Encoding": "gzip"})
    assert gitpush.hold(compressed.request, state, ITEM) is not None
    large, state = push(b"")
    large.request.headers["Content-Length"] = str(gitpush.PUSH_BODY_LIMIT + 1)
    assert gitpush.hold(large.request, state, ITEM) is not None
    chunked, state = push(b"")
    del chunked.request.headers["Content-Length"]
    chunked.request.headers["Transfer-Encoding"] = "chunked"
    refused = gitpush.hold(chunked.request, state, ITEM)
    assert refused is not None and refused.reason is Reason.GIT_PUSH_DENIED
    assert state.push == ()
