"""The three scenarios of the source pages, end to end (issue 5), on the whole system.

The same code runs `make demo`; here what it observed is asserted exactly.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.scenarios import audit_logging, mcp_budget, privacy_gate, security_gate
from testbed.expect import header_values
from testbed.stage import Stage, system_stage

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    with system_stage(tmp_path_factory.mktemp("stage")) as built:
        yield built


@pytest.fixture
def narration() -> list[str]:
    return []


def test_security_gate_denies_rm_rf_and_lets_the_harmless_command_run(
    stage: Stage, narration: list[str]
):
    observed = security_gate(stage, narration.append)
    denied, harmless = observed.calls

    assert denied.result == {
        "status": "denied",
        "output": "",
        "reason": "Destructive command blocked by security gate.",
    }
    assert (observed.workspace / "victim").is_dir()  # the tool never ran
    assert harmless.result["status"] == "ok"
    assert harmless.result["output"] == "harmless\nvictim\n"
    assert any("decision=deny" in line and "group=security-gate" in line for line in denied.log)


def test_privacy_gate_denies_private_then_the_public_read_succeeds(
    stage: Stage, narration: list[str]
):
    private, public = privacy_gate(stage, narration.append).calls

    assert private.result["status"] == "denied"
    assert private.result["reason"].startswith(
        "Access to confidential `/private/` records is blocked"
    )
    assert private.result["output"] == ""
    assert public.result == {"status": "ok", "output": '{"customers": 42}'}


def test_audit_hooks_reach_telemetry_with_the_proxys_credential_only(
    stage: Stage, narration: list[str]
):
    observed = audit_logging(stage, narration.append)

    write, read = observed.calls
    assert write.result["status"] == "ok"
    assert read.result == {"status": "ok", "output": "event 1"}
    # Telemetry got one POST per tool call, with the token the sandbox never had.
    assert [(r["method"], r["target"], r["sni"]) for r in observed.upstream] == [
        ("POST", "/api/v1/agent-events", "telemetry.example.test")
    ] * 2
    for record in observed.upstream:
        assert header_values(record, "Authorization") == [f"Bearer {stage.token}"]
    # The two other hooks were refused by the proxy, and the runner said so (fail open).
    decided = [(a["host"], a["decision"], a["reason"], a["injected"]) for a in observed.audit]
    assert (
        decided
        == [
            ("telemetry.example.test", "allow", "allowlisted", ["Authorization"]),
            ("loopback-hook.example.test", "deny", "loopback", []),
            ("not-allowed.example.org", "deny", "not_allowlisted", []),
        ]
        * 2
    )
    assert sum("answered HTTP 403" in line for line in write.log + read.log) == 4
    assert observed.traps == []


def test_the_sandbox_holds_no_secret(stage: Stage, narration: list[str]):
    observed = audit_logging(stage, narration.append)
    sandbox_files = [p for p in observed.workspace.parent.rglob("*") if p.is_file()]
    sandbox_files += list(Path(f"/etc/netns/{stage.topology.ns_sandbox}").glob("*"))
    assert sandbox_files
    for path in sandbox_files:
        assert stage.token not in path.read_text(errors="replace"), path
    environ = subprocess.run(
        [*stage.topology.exec_prefix(stage.topology.ns_sandbox), "env"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    assert stage.token not in environ
    assert stage.token not in "\n".join(narration)  # the demo's narration masks it


def test_mcp_calls_are_judged_and_the_budget_is_spent(stage: Stage, narration: list[str]):
    """Issue 48: `make demo` also shows an MCP call judged and a budget spent."""
    observed = mcp_budget(stage, narration.append)
    assert observed.answers == [  # fmt: skip
        [200, None, None],
        [
            403,
            "mcp_tool_denied",
            'egress_denied: mcp_tool_denied: the tool "delete_repository" is not in mcp.tools',
        ],
        [200, None, None],
        [429, "budget_exceeded", "egress_denied"],  # the refused call spent one, too
        [429, "budget_exceeded", "egress_denied"],
    ]
    posts = [line for line in observed.audit if line["method"] == "POST"]
    assert [(line["decision"], line["reason"]) for line in posts] == [
        ("allow", "allowlisted"),
        ("deny", "mcp_tool_denied"),
        ("allow", "allowlisted"),
        ("deny", "budget_exceeded"),
        ("deny", "budget_exceeded"),
    ]
    assert len(observed.upstream) == 2  # the refused calls never reached the server
    for record in observed.upstream:
        assert header_values(record, "Authorization") == [f"Bearer {stage.token}"]
    assert "   the MCP server received 2 of 5 calls" in narration
