"""The git push gate's adapter (addons/clauses/rules.py) on mitmproxy test flows: what it
refuses before reading, and how it judges a command list (the layer that feeds it:
tests/addons/test_pushgate.py)."""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.clauses import rules as gitpush
from sandbox_egress.addons.layers import pushgate
from sandbox_egress.addons.shared import FlowState
from sandbox_egress.proxy.clauses.budget import BudgetKey, Rate
from sandbox_egress.proxy.clauses.git import Commands, pkt, read_commands
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from tests.addons.test_egress import Resolver, count, https_flow, make_addon, run

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


def push(**headers: str) -> tuple[http.HTTPFlow, FlowState]:
    flow = tflow.tflow()
    flow.request.method = "POST"
    flow.request.path = "/acme/web.git/git-receive-pack"
    flow.request.headers.clear()
    flow.request.headers["Transfer-Encoding"] = "chunked"
    for name, value in headers.items():
        flow.request.headers[name] = value
    return flow, FlowState(ALLOWED, "git.example")


def commands(ref: str) -> Commands:
    found = read_commands(pkt(f"{'a' * 40} {'b' * 40} {ref}\0report-status\n".encode()) + b"0000")
    assert isinstance(found, Commands)
    return found


def never(_: Commands | str) -> bool:
    raise AssertionError("not judged here")


def test_a_chunked_push_is_held_by_the_gate() -> None:
    pushgate.install()
    flow, state = push()
    assert gitpush.hold(flow, state, never, ITEM) is None
    assert flow.request.stream is False and state.push == (ITEM,)
    assert isinstance(flow.metadata[pushgate.GATE], pushgate.Gate)


def test_a_push_every_ref_of_which_is_allowed_goes_on() -> None:
    flow, state = push()
    state.push = (ITEM,)
    assert gitpush.judge(flow, state, ALLOWED, commands("refs/heads/agent/x")) is ALLOWED
    assert flow.response is None and state.push == ()


def test_a_refused_ref_gets_report_status() -> None:
    flow, state = push()
    state.push = (ITEM,)
    decision = gitpush.judge(flow, state, ALLOWED, commands("refs/heads/main"))
    assert (decision.allowed, decision.reason, decision.clause) == (
        False, Reason.GIT_PUSH_DENIED, "git.push[0]")  # fmt: skip
    assert flow.response is not None and flow.response.status_code == 200
    assert flow.response.headers["X-Egress-Denied"] == "git_push_denied"
    assert b"ng refs/heads/main egress policy: this ref may not be pushed" in (
        flow.response.content or b""
    )


def test_a_malformed_list_or_no_item_is_a_readable_refusal() -> None:
    for answer, items in (("not a pkt-line", (ITEM,)), (commands("refs/heads/agent/x"), ())):
        flow, state = push()
        state.push = items
        decision = gitpush.judge(flow, state, ALLOWED, answer)
        assert decision.reason is Reason.GIT_PUSH_DENIED
        assert flow.response is not None and flow.response.status_code == 403


def test_git_s_probe_goes_on() -> None:
    flow, state = push()
    state.push = (ITEM,)
    probe = read_commands(b"0000")
    assert isinstance(probe, Commands) and probe.commands == ()
    assert gitpush.judge(flow, state, ALLOWED, probe) is ALLOWED


def test_what_cannot_be_held_is_refused_before_reading() -> None:
    pushgate.install()
    compressed, state = push(**{"Content-Encoding": "gzip"})
    refused = gitpush.hold(compressed, state, never, ITEM)
    assert refused is not None and refused.reason is Reason.GIT_PUSH_DENIED
    lying, state = push(**{"Content-Length": "12, 13"})
    del lying.request.headers["Transfer-Encoding"]
    refused = gitpush.hold(lying, state, never, ITEM)
    assert refused is not None and refused.reason is Reason.GIT_PUSH_DENIED
    assert state.push == () and pushgate.GATE not in lying.metadata


def test_an_allowed_push_is_spent_from_the_upload_budget() -> None:
    pushgate.install()
    resolver = Resolver({"git.example": ["93.184.216.34"]})
    addon, metrics, _ = make_addon(resolver, {
        "domain": "git.example", "budget": {"upload": "1MiB/day"},
        "git": {"push": [{"repo": "acme/web", "refs": ["refs/heads/agent/**"]}]}})  # fmt: skip
    flow = https_flow("git.example", [(b"Host", b"git.example"),
                                      (b"Transfer-Encoding", b"chunked")])  # fmt: skip
    flow.request.method, flow.request.path = "POST", "/acme/web.git/git-receive-pack"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        gate = flow.metadata[pushgate.GATE]
        assert flow.request.stream is False  # held: nothing goes upstream yet
        assert gate.judge(commands("refs/heads/agent/x")) is True

        async def stream() -> bytes:
            meter = flow.request.stream
            assert callable(meter)
            return b"".join(b"".join(meter(chunk)) for chunk in (b"x" * 1000, b"y" * 24))

        assert run(stream()) == b"x" * 1000 + b"y" * 24
        key = BudgetKey(None, "git.example")
        left = addon.shared.state.remaining(key, "upload", Rate(1024**2, 86400))
        assert left < 1024**2 - 1000  # spent, not only checked (D182)
        assert count(metrics, "allow", "allowlisted") == 1


def test_a_refused_push_is_counted_once_and_spends_nothing() -> None:
    pushgate.install()
    resolver = Resolver({"git.example": ["93.184.216.34"]})
    addon, metrics, _ = make_addon(resolver, {
        "domain": "git.example", "budget": {"upload": "1MiB/day"},
        "git": {"push": [{"repo": "acme/web", "refs": ["refs/heads/agent/**"]}]}})  # fmt: skip
    flow = https_flow("git.example", [(b"Host", b"git.example"),
                                      (b"Transfer-Encoding", b"chunked")])  # fmt: skip
    flow.request.method, flow.request.path = "POST", "/acme/web.git/git-receive-pack"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        assert flow.metadata[pushgate.GATE].judge(commands("refs/heads/main")) is False
        assert flow.response is not None and flow.response.status_code == 200
        assert flow.request.stream is False
        assert count(metrics, "deny", "git_push_denied") == 1
        key = BudgetKey(None, "git.example")
        assert addon.shared.state.remaining(key, "upload", Rate(1024**2, 86400)) == 1024**2
