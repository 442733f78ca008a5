"""Aggregation with real hooks: order, first deny, post only after the tool ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.errors import PayloadError, WorkspaceError
from sandbox_egress.hookrunner.outcome import Outcome
from sandbox_egress.hookrunner.session import HookSession
from tests.hookrunner.helpers import Env, command, pre_group, rule

DENY = """echo '{"decision": "deny", "reason": "%s"}'"""
ALLOW = """echo '{"decision": "allow"}'"""


def mark(order: Path, name: str, then: str = "") -> dict[str, Any]:
    """A command handler that appends its name to the order file, then runs ``then``."""
    return command(f"echo {name} >> {order}; {then}".rstrip("; "))


def order_of(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_groups_rules_and_handlers_run_in_order(env: Env) -> None:
    order = env.root / "order"
    env.hooks(
        {
            "operator": pre_group(rule("*", mark(order, "op1"), mark(order, "op2"))),
        },
        system=True,
    )
    env.hooks(
        {
            "first": pre_group(
                rule("read_file", mark(order, "f1a"), mark(order, "f1b")),
                rule("write_file", mark(order, "never")),
                rule(".*_file", mark(order, "f2")),
            ),
            "disabled": pre_group(rule("*", mark(order, "off")), enabled=False),
            "second": pre_group(rule("read_file|list_files", mark(order, "s1"))),
        }
    )
    decision = env.session().pre("read_file", {"path": "a"})
    assert decision.allowed
    assert order_of(order) == ["op1", "op2", "f1a", "f1b", "f2", "s1"]
    assert [r.group for r in decision.runs] == ["operator"] * 2 + ["first"] * 3 + ["second"]


def test_first_deny_stops_everything_after_it(env: Env) -> None:
    order = env.root / "order"
    env.hooks(
        {
            "a": pre_group(
                rule(
                    "*",
                    mark(order, "a1", ALLOW),
                    mark(order, "a2", DENY % "first deny"),
                    mark(order, "a3", DENY % "second deny"),
                )
            ),
            "b": pre_group(rule("*", mark(order, "b1", DENY % "other group"))),
        }
    )
    decision = env.session().pre("code_execution", {"code": "x"})
    assert order_of(order) == ["a1", "a2"]
    assert (decision.allowed, decision.reason, decision.group) == (False, "first deny", "a")
    assert decision.to_json() == {"decision": "deny", "reason": "first deny", "group": "a"}
    assert [r.outcome for r in decision.runs] == [Outcome.ALLOW, Outcome.DENY]


def test_deny_without_reason_gets_a_default_naming_the_group(env: Env) -> None:
    env.hooks({"gate": pre_group(rule("*", command("""echo '{"decision": "deny"}'""")))})
    decision = env.session().pre("read_file", {"path": "a"})
    assert (decision.reason, decision.group) == ('Tool call denied by hook group "gate".', "gate")


def test_failing_handlers_do_not_stop_the_chain(env: Env) -> None:
    order = env.root / "order"
    env.hooks(
        {
            "g": pre_group(
                rule(
                    "*",
                    mark(order, "crash", "exit 2"),
                    mark(order, "garbage", "echo '{nope'"),
                    mark(order, "deny", DENY % "last"),
                )
            )
        }
    )
    decision = env.session().pre("read_file", {"path": "a"})
    assert order_of(order) == ["crash", "garbage", "deny"]
    assert (decision.allowed, decision.reason) == (False, "last")


def test_invalid_handler_is_skipped_with_a_warning_and_the_rest_works(env: Env) -> None:
    order = env.root / "order"
    bad = {**mark(order, "bad"), "timeout": "10"}
    env.hooks({"g": pre_group(rule("*", bad, mark(order, "good", DENY % "good")))})
    decision = env.session().pre("read_file", {"path": "a"})
    assert (order_of(order), decision.reason) == (["good"], "good")
    [warning] = env.warnings()
    assert (warning["kind"], warning["path"], warning["cause"]) == (
        "config",
        "$.g.pre_tool_execution[0].hooks[0].timeout",
        'must be a positive integer of seconds, got "10"; handler skipped',
    )
    assert env.metrics.value("hook_warnings_total", kind="config") == 1


def test_the_session_keeps_its_snapshot_when_the_agent_edits_hooks_json(env: Env) -> None:
    path = env.hooks({"gate": pre_group(rule("*", command(DENY % "guarded")))})
    session = env.session()
    path.write_text("{}")
    assert session.pre("read_file", {"path": "a"}).reason == "guarded"
    assert env.session().pre("read_file", {"path": "a"}).allowed  # a new session re-reads


def test_a_file_reached_both_ways_runs_its_hooks_once(env: Env) -> None:
    order = env.root / "order"
    path = env.hooks({"g": pre_group(rule("*", mark(order, "once")))})
    env.session(system_config=path).pre("read_file", {"path": "a"})
    assert order_of(order) == ["once"]


def post_group(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"post_tool_execution": list(rules)}


def test_post_hooks_run_only_for_tools_that_ran_and_cannot_block(env: Env) -> None:
    order = env.root / "order"
    (env.workspace / "secret.txt").write_text("s")
    env.hooks(
        {
            "gate": pre_group(rule("read_file", command(DENY % "no reading"))),
            "audit": post_group(
                rule("*", mark(order, "p1", DENY % "ignored"), mark(order, "p2", "exit 1"))
            ),
        }
    )
    session = env.session()
    denied = session.exec_tool("read_file", {"path": "secret.txt"})
    assert (denied.status, denied.reason, order_of(order)) == ("denied", "no reading", [])
    ran = session.exec_tool("list_files", {"path": "."})
    assert (ran.status, ran.output) == ("ok", ".agents/\nsecret.txt")
    assert order_of(order) == ["p1", "p2"]
    outcomes = [env.runs("post_tool_execution", "command", o) for o in ("ok", "exit_nonzero")]
    assert outcomes == [1, 1]
    assert [(w["kind"], w["outcome"]) for w in env.warnings()] == [("post_failure", "exit_nonzero")]


@pytest.mark.privileged
def test_post_payload_has_error_only_when_the_tool_failed_or_wrote_stderr(env: Env) -> None:
    log = env.root / "payloads"
    env.hooks({"audit": post_group(rule("*", command(f"cat >> {log}; echo >> {log}")))})
    session = env.session()
    session.exec_tool("code_execution", {"code": "echo out", "language": "bash"})
    session.exec_tool("code_execution", {"code": "echo warn >&2", "language": "bash"})
    session.exec_tool("code_execution", {"code": "exit 4", "language": "bash"})
    session.exec_tool("read_file", {"path": "missing.txt"})
    payloads = [json.loads(line) for line in log.read_text().splitlines()]
    assert [p.get("error") for p in payloads] == [
        None,
        "warn\n",
        "exited with status 4",
        "read_file: missing.txt: No such file or directory",
    ]
    assert ["error" in p for p in payloads] == [False, True, True, True]
    assert payloads[0] == {
        "tool_call": {"name": "code_execution", "args": {"code": "echo out", "language": "bash"}},
        "environment_id": "env_test",
    }


def test_post_report_api(env: Env) -> None:
    log = env.root / "payload"
    env.hooks({"audit": post_group(rule("write_file", command(f"cat > {log}")))})
    runs = env.session().post("write_file", {"path": "a", "content": "b"}, error="disk full")
    assert [r.outcome for r in runs] == [Outcome.OK]
    assert json.loads(log.read_text())["error"] == "disk full"


def test_no_matching_hook_allows_without_running_anything(env: Env) -> None:
    env.hooks({"g": pre_group(rule("write_file", command("exit 1")))})
    decision = env.session().pre("read_file", {"path": "a"})
    assert (decision.allowed, decision.runs) == (True, ())
    assert env.metrics.value("hook_decisions_total", decision="allow") == 1


def test_api_refuses_malformed_calls(env: Env) -> None:
    session = env.session()
    with pytest.raises(PayloadError, match="the tool name must be a non-empty string"):
        session.pre("", {})
    with pytest.raises(PayloadError, match="the tool arguments must be a JSON object"):
        session.pre("read_file", ["x"])  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="the tool arguments are not JSON"):
        session.pre("read_file", {"path": {1, 2}})


def test_workspace_must_be_a_directory(env: Env) -> None:
    with pytest.raises(WorkspaceError):
        HookSession(env.root / "missing", metrics=env.metrics, stream=env.stream)
