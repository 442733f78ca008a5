"""Issue 20, item 2: a group with ``"fail_closed": true`` denies when its pre handler fails.

Real sessions and real child processes: a handler that crashes, times out, is
not found, prints what is not a decision or prints nothing denies in a
fail-closed group, with the failure as the reason; the same handlers in an
ordinary group still fail open (the specification's default), and post
handlers of a fail-closed group can still block nothing.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from sandbox_egress.hookrunner.loader import load_config
from tests.hookrunner.helpers import Env, command, rule


def closed_group(*handlers: dict[str, Any], fail_closed: Any = True) -> dict[str, Any]:
    return {"fail_closed": fail_closed, "pre_tool_execution": [rule("", *handlers)]}


FAILURES = [
    ("crash", command("kill -SEGV $$"), "crashed",
     'hook group "g" fails closed and its handler crashed: killed by SIGSEGV'),
    ("exit 1", command("echo boom >&2; exit 1"), "exit_nonzero",
     "hook group \"g\" fails closed and its handler exit_nonzero: exited with status 1 "
     "(stderr: 'boom')"),
    ("missing program", command("no-such-gate-program"), "not_found",
     'hook group "g" fails closed and its handler not_found: exited with status 127 '
     "(stderr: '/bin/sh: 1: no-such-gate-program: not found')"),
    ("timeout", command("sleep 30", timeout=1), "timeout",
     'hook group "g" fails closed and its handler timeout: did not finish within 1 s; '
     "its process group was killed"),
    ("unparseable", command("echo not json"), "unparseable", None),
    ("empty output", command("true"), "empty_output", None),
    ("near miss", command('echo \'{"decision": "DENY"}\''), "near_miss", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("handler", "outcome", "reason"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
def test_a_failure_in_a_fail_closed_group_denies(
    env: Env, handler: dict[str, Any], outcome: str, reason: str | None
) -> None:
    env.hooks({"g": closed_group(handler)})
    decision = env.session().pre("code_execution", {"code": "ls"})
    assert (decision.allowed, decision.group) == (False, "g")
    assert decision.reason is not None
    assert decision.reason.startswith(f'hook group "g" fails closed and its handler {outcome}: ')
    if reason is not None:
        assert decision.reason == reason
    [warning] = env.warnings()
    assert (warning["kind"], warning["outcome"], warning["action"]) == (
        "fail_closed",
        outcome,
        "denied",
    )


@pytest.mark.parametrize(
    "handler", [f[1] for f in FAILURES if f[0] != "timeout"], ids=[f[0] for f in FAILURES[:-1]]
)
def test_the_same_failure_in_an_ordinary_group_still_allows(
    env: Env, handler: dict[str, Any]
) -> None:
    env.hooks({"g": closed_group(handler, fail_closed=False)})
    assert env.session().pre("code_execution", {"code": "ls"}).allowed
    assert [w["action"] for w in env.warnings()] == ["allowed"]


def test_an_explicit_allow_and_deny_are_answers_not_failures(env: Env) -> None:
    env.hooks({"g": closed_group(command('echo \'{"decision": "allow"}\''))})
    assert env.session().pre("read_file", {"path": "x"}).allowed
    env.hooks({"g": closed_group(command('echo \'{"decision": "deny", "reason": "no"}\''))})
    assert env.session().pre("read_file", {"path": "x"}).reason == "no"


def test_an_unreachable_http_handler_denies_in_a_fail_closed_group(env: Env) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        url = f"https://127.0.0.1:{port}/gate"
        env.hooks({"g": closed_group({"type": "http", "url": url, "timeout": 5})})
        decision = env.session().pre("read_file", {"path": "x"})
    assert decision.allowed is False
    assert decision.reason is not None
    assert decision.reason.startswith('hook group "g" fails closed and its handler network_error: ')


def test_the_first_failure_stops_later_handlers_and_groups(env: Env) -> None:
    later = env.root / "later-ran"
    env.hooks(
        {
            "g": closed_group(command("exit 3"), command(f"touch {later}")),
            "h": {"pre_tool_execution": [rule("", command(f"touch {later}"))]},
        }
    )
    assert env.session().pre("read_file", {"path": "x"}).allowed is False
    assert not later.exists()


def test_post_handlers_of_a_fail_closed_group_cannot_block(env: Env) -> None:
    env.hooks({"g": {"fail_closed": True, "post_tool_execution": [rule("", command("exit 1"))]}})
    session = env.session()
    [run] = session.post("read_file", {"path": "x"})
    assert run.outcome.value == "exit_nonzero"
    assert env.warnings()[0]["kind"] == "post_failure"


def test_exec_is_denied_and_the_tool_does_not_run(env: Env) -> None:
    env.hooks({"g": closed_group(command("no-such-gate-program"))})
    result = env.session().exec_tool("write_file", {"path": "out.txt", "content": "x"})
    assert result.status == "denied"
    assert not (env.workspace / "out.txt").exists()


def test_fail_closed_must_be_a_boolean(env: Env) -> None:
    env.hooks({"g": closed_group(command("true"), fail_closed="yes")})
    config = load_config(env.workspace, env.system_config)
    assert config.groups == ()
    [problem] = config.problems
    assert (problem.location, problem.message) == (
        "$.g.fail_closed",
        "must be true or false, got a string; group skipped",
    )
