"""Git over HTTPS (docs/configuration.md#git-over-https), the pure part: smart-HTTP recognition, the decision by
repository, the receive-pack command list and git's report-status. The real `git`
client through the proxy: tests/e2e/test_git_e2e.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from sandbox_egress.proxy.clauses.git import (
    COMMANDS_LIMIT,
    Commands,
    GitRequest,
    judge_push,
    judge_pushes,
    pkt,
    read_commands,
    report_status,
    smart_http,
)
from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.stages import ConnectionFacts, decide_request
from tests.proxy.test_stages import ask, resolve

OLD, NEW = "a" * 40, "b" * 40
ZERO = "0" * 40

SMART = [
    ("GET", "/acme/web.git/info/refs?service=git-upload-pack",
     GitRequest("acme/web", "git-upload-pack", False)),
    ("GET", "/acme/web/info/refs?service=git-receive-pack",
     GitRequest("acme/web", "git-receive-pack", False)),
    ("POST", "/acme/web.git/git-receive-pack", GitRequest("acme/web", "git-receive-pack", True)),
    ("POST", "/a/b/c.git/git-upload-pack", GitRequest("a/b/c", "git-upload-pack", True)),
    ("POST", "/acme/web.git/git-receive-pac%6b", GitRequest("acme/web", "git-receive-pack", True)),
    ("GET", "/acme/web.git/git-receive-pack", None),
    ("POST", "/acme/web.git/info/refs?service=git-receive-pack", None),
    ("GET", "/acme/web.git/info/refs?service=git-receive-pack&service=git-upload-pack", None),
    ("GET", "/acme/web.git/info/refs?service=other", None),
    ("GET", "/acme/web.git/HEAD", None),
    ("POST", "/git-receive-pack", None),
]  # fmt: skip


@pytest.mark.parametrize(("method", "target", "expected"), SMART)
def test_smart_http(method: str, target: str, expected: GitRequest | None) -> None:
    assert smart_http(method, target) == expected


def command_list(*lines: str, caps: str = "report-status side-band-64k") -> bytes:
    first, *rest = lines
    return pkt(f"{first}\0{caps}\n".encode()) + b"".join(pkt(f"{r}\n".encode()) for r in rest)


BODIES = [
    ("one", command_list(f"{OLD} {NEW} refs/heads/agent/x") + b"0000PACK...", 1),
    ("two", command_list(f"{OLD} {NEW} refs/heads/a", f"{ZERO} {NEW} refs/heads/b") + b"0000", 2),
    ("shallow-first", pkt(f"shallow {OLD}\n".encode()) + command_list(f"{OLD} {NEW} refs/x")
     + b"0000", 1),
    ("sha256", command_list(f"{'c' * 64} {'d' * 64} refs/heads/a") + b"0000", 1),
    ("no-flush", command_list(f"{OLD} {NEW} refs/heads/a"), "flush"),
    ("probe", b"0000", 0),  # git's probe before a large push (D181)
    ("empty-then-more", b"0000PACK", "empty"),
    ("shallow-only", pkt(f"shallow {OLD}\n".encode()) + b"0000", "empty"),
    ("hex-prefix", b"0x1f" + b"x" * 27, "not a pkt-line"),
    ("newline-in-id", command_list(f"{OLD}\n {NEW} refs/heads/a") + b"0000", "not '<old-id>"),
    ("not-hex", b"zzzz", "not a pkt-line"),
    ("short-length", b"0003", "not a pkt-line"),
    ("truncated", b"00ff" + b"x" * 10, "not a pkt-line"),
    ("not-a-command", command_list("hello") + b"0000", "not '<old-id> <new-id> <ref>'"),
    ("no-ref", command_list(f"{OLD} {NEW} HEAD") + b"0000", "names no ref"),
    ("non-ascii", pkt(b"\xff\xfe\n") + b"0000", "not ASCII"),
    ("over-the-bound", b"".join(pkt(f"{OLD} {NEW} refs/heads/{i}\n".encode())
     for i in range(COMMANDS_LIMIT // 80)) + b"0000", "flush"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in BODIES], ids=[c[0] for c in BODIES])
def test_read_commands(body: bytes, expected: int | str) -> None:
    found = read_commands(body)
    if isinstance(expected, int):
        assert isinstance(found, Commands) and len(found.commands) == expected
    else:
        assert isinstance(found, str) and expected in found


GIT = {
    "domain": "git.example",
    "git": {
        "fetch": ["acme/*"],
        "push": [
            {"repo": "acme/web", "refs": ["refs/heads/agent/**"]},
            {"repo": "acme/tools", "refs": ["refs/heads/**"], "delete": True},
        ],
    },
    "rules": [{"methods": ["GET"]}],
}
GIT_POLICY = Policy(parse({"network": {"allowlist": [GIT]}}, "env.yaml", {}))

GIT_REQUESTS = [
    ("fetch-allowed", "GET", "/acme/web.git/info/refs?service=git-upload-pack",
     Reason.ALLOWLISTED, "git.fetch", False),
    ("fetch-post-allowed", "POST", "/acme/web.git/git-upload-pack", Reason.ALLOWLISTED,
     "git.fetch", False),
    ("fetch-other-org", "POST", "/evil/web.git/git-upload-pack", Reason.RULE_MISMATCH,
     "git.fetch", False),
    ("push-advertisement", "GET", "/acme/web.git/info/refs?service=git-receive-pack",
     Reason.ALLOWLISTED, "git.push[0]", False),
    ("push-post-held", "POST", "/acme/web.git/git-receive-pack", Reason.ALLOWLISTED,
     "git.push[0]", True),
    ("push-second-item", "POST", "/acme/tools/git-receive-pack", Reason.ALLOWLISTED,
     "git.push[1]", True),
    ("push-no-item", "POST", "/acme/other.git/git-receive-pack", Reason.GIT_PUSH_DENIED,
     "git.push", False),
    ("push-hidden-in-dots", "POST", "/evil/../acme/web.git/git-receive-pack",
     Reason.BAD_REQUEST, "", False),
    ("other-request-follows-rules", "DELETE", "/acme/web", Reason.RULE_MISMATCH, "", False),
    ("other-get-follows-rules", "GET", "/acme/web", Reason.ALLOWLISTED, "rules[0]", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "target", "reason", "clause", "held"),
    [c[1:] for c in GIT_REQUESTS],
    ids=[c[0] for c in GIT_REQUESTS],
)
def test_git_requests(method: str, target: str, reason: Reason, clause: str, held: bool) -> None:
    base = ask("git.example", method=method)
    request = replace(base, names=replace(base.names, path=target))
    answer = asyncio.run(decide_request(GIT_POLICY, resolve, ConnectionFacts(), request))
    assert (answer.decision.reason, answer.decision.clause) == (reason, clause)
    assert bool(answer.push) is held


def push_item(index: int = 0):  # type: ignore[no-untyped-def]
    entry = GIT_POLICY.config.allowlist[0]
    assert entry.git is not None
    return entry.git.push[index]


def test_judge_push_names_every_refused_ref() -> None:
    commands = read_commands(
        command_list(
            f"{OLD} {NEW} refs/heads/agent/a/b",
            f"{OLD} {NEW} refs/heads/main",
            f"{OLD} {ZERO} refs/heads/agent/old",
        )
        + b"0000"
    )
    assert isinstance(commands, Commands)
    assert judge_push(push_item(0), commands) == (
        "",
        "egress policy: this ref may not be pushed",
        "egress policy: deleting this ref is not allowed",
    )
    assert judge_push(push_item(1), commands) == ("", "", "")


def test_report_status_in_side_band_and_plain() -> None:
    commands = read_commands(command_list(f"{OLD} {NEW} refs/heads/main") + b"0000")
    assert isinstance(commands, Commands)
    inner = pkt(b"unpack ok\n") + pkt(b"ng refs/heads/main no\n") + b"0000"
    assert report_status(commands, ("no",)) == pkt(b"\x01" + inner) + b"0000"
    plain = replace(commands, capabilities=frozenset({"report-status"}))
    assert report_status(plain, ("no",)) == inner
    allowed_with_rest = report_status(plain, ("",))
    assert b"ng refs/heads/main egress policy: refused with the rest of this push" in (
        allowed_with_rest
    )


INVALID = [
    ({"fetch": []}, "network.allowlist[0].git.fetch"),
    ({"fetch": ["/acme/*"]}, "network.allowlist[0].git.fetch: a glob has no leading '/'"),
    ({"push": [{"repo": "a/b"}]}, "network.allowlist[0].git.push[0]"),
    ({"push": [{"repo": "a/b", "refs": ["refs/**x"]}]},
     "network.allowlist[0].git.push[0].refs: a glob has no leading '/'"),
    ({"pull": ["a"]}, "network.allowlist[0].git"),
]  # fmt: skip


@pytest.mark.parametrize(("git", "expected"), INVALID)
def test_git_problems_name_their_location(git: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({"network": {"allowlist": [{"domain": "a.example", "git": git}]}}, "env.yaml", {})
    assert any(expected in str(p) for p in info.value.problems), info.value.problems


def test_git_and_passthrough_are_refused_together() -> None:
    with pytest.raises(ConfigError) as info:
        entry = {"domain": "a.example", "passthrough": True, "git": {"fetch": ["a/*"]}}
        parse({"network": {"allowlist": [entry]}}, "env.yaml", {})
    assert "network.allowlist[0].passthrough" in str(info.value)


# A sandbox's request passes its node's rules and git items too (the node is the ceiling):
# the sandbox file below opens git.example wide; the node's entry (GIT) does not.
WIDE_SANDBOX = {"domain": "git.example", "git": {"push": [{"repo": "**", "refs": ["**"]}]}}
CEILING = [
    ("node-rules-refuse-delete", "DELETE", "/acme/web", Reason.RULE_MISMATCH, "", 0),
    ("node-git-refuses-fetch", "POST", "/evil/web.git/git-upload-pack", Reason.RULE_MISMATCH,
     "git.fetch", 0),
    ("node-git-refuses-push-repo", "POST", "/acme/other.git/git-receive-pack",
     Reason.GIT_PUSH_DENIED, "git.push", 0),
    ("both-items-held", "POST", "/acme/web.git/git-receive-pack", Reason.ALLOWLISTED,
     "git.push[0]", 2),
    ("node-get-allowed", "GET", "/acme/web", Reason.ALLOWLISTED, "", 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "target", "reason", "clause", "items"),
    [c[1:] for c in CEILING],
    ids=[c[0] for c in CEILING],
)
def test_a_sandbox_request_passes_the_nodes_rules_too(
    method: str, target: str, reason: Reason, clause: str, items: int, monkeypatch: Any
) -> None:
    from sandbox_egress.proxy.tenancy.sandboxes import Sandbox
    from sandbox_egress.proxy.tenancy.tenants import SandboxPolicy

    own = parse({"network": {"allowlist": [WIDE_SANDBOX]}}, "sbx.yaml", {})
    policy = SandboxPolicy(Sandbox("sbx", own, sandbox_class="ci"), GIT_POLICY)
    decided = []
    node_decide = GIT_POLICY.decide
    monkeypatch.setattr(
        GIT_POLICY, "decide", lambda *a, **k: decided.append(a) or node_decide(*a, **k)
    )
    base = ask("git.example", method=method)
    request = replace(base, names=replace(base.names, path=target))
    answer = asyncio.run(decide_request(policy, resolve, ConnectionFacts(), request))
    assert (answer.decision.reason, answer.decision.clause) == (reason, clause)
    assert len(answer.push) == items
    # The node's host is decided once per request: its rules stage reuses that decision (D167).
    assert len(decided) == 1


def test_every_held_item_must_admit_each_ref() -> None:
    node = push_item(0)  # acme/web: refs/heads/agent/** only
    own = parse({"network": {"allowlist": [WIDE_SANDBOX]}}, "sbx.yaml", {})
    assert own.allowlist[0].git is not None
    wide = own.allowlist[0].git.push[0]
    commands = read_commands(
        pkt(f"{OLD} {NEW} refs/heads/agent/x\0report-status\n".encode())
        + pkt(f"{OLD} {NEW} refs/heads/main\n".encode())
        + b"0000"
    )
    assert not isinstance(commands, str)
    assert judge_pushes((wide,), commands) == ("", "")
    assert judge_pushes((wide, node), commands) == (
        "",
        "egress policy: this ref may not be pushed",
    )
