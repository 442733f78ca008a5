"""The bridge's word in Claude Code's PreToolUse answer, the file tools kept from the
token, the settings and the grant step's token reading (issue 47, D500, D505, D506)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.bridge.answer import unwrapped, with_bridge
from sandbox_egress.hookrunner.bridge.files import touches
from sandbox_egress.hookrunner.bridge.grant import command, read_token
from sandbox_egress.hookrunner.bridge.hosts import Destination
from sandbox_egress.hookrunner.bridge.judge import BridgeWord
from sandbox_egress.hookrunner.bridge.settings import BridgeSettings, from_env
from sandbox_egress.hookrunner.enforce.bound import original, package_root, shell_command

WS = Path("/workspace")
HELD = ((Destination("new.example", 443), "ap-1"),)
ASK = BridgeWord("ask", "reaches new.example:443", HELD)
STEP = command(
    sys.executable, package_root(), "http://127.0.0.1:9", "/run/t", "ap-1", "new.example:443"
)


def allowed(cmd: str) -> dict[str, Any]:
    wrapped = shell_command(cmd, WS)
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                   "updatedInput": {"command": wrapped, "timeout": 5}}}  # fmt: skip


def test_an_allowed_bash_call_becomes_an_ask_whose_yes_runs_the_grant_step_first() -> None:
    answer = with_bridge(allowed("curl https://new.example/"), ASK, [STEP])
    specific = answer["hookSpecificOutput"]
    assert specific["permissionDecision"] == "ask"
    assert specific["permissionDecisionReason"] == "reaches new.example:443"
    assert specific["updatedInput"] == {
        "command": STEP + "; " + shell_command("curl https://new.example/", WS),
        "timeout": 5,
    }
    # PostToolUse hooks read the agent's own command again.
    assert original(unwrapped(specific["updatedInput"]["command"])) == "curl https://new.example/"


def test_an_ask_already_there_keeps_its_reason_and_the_bridge_adds_its_own() -> None:
    given = allowed("curl https://new.example/")
    given["hookSpecificOutput"].update(
        permissionDecision="ask", permissionDecisionReason="hook: sure?"
    )
    specific = with_bridge(given, ASK, [STEP])["hookSpecificOutput"]
    assert specific["permissionDecision"] == "ask"
    assert specific["permissionDecisionReason"] == "hook: sure?\nreaches new.example:443"


def test_no_grant_step_unless_the_command_is_the_boundarys_wrapping() -> None:
    bare = {"hookSpecificOutput": {"updatedInput": {"command": "curl https://new.example/"}}}
    specific = with_bridge(bare, ASK, [STEP])["hookSpecificOutput"]
    assert specific["permissionDecision"] == "ask"
    assert specific["updatedInput"] == {"command": "curl https://new.example/"}
    webfetch = with_bridge(None, BridgeWord("ask", "cannot carry"), [])
    assert webfetch == {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                        "permissionDecision": "ask", "permissionDecisionReason": "cannot carry"}}  # fmt: skip


def test_the_bridges_deny_drops_the_input_and_replaces_an_allow() -> None:
    specific = with_bridge(allowed("cat x"), BridgeWord("deny", "no token"), [])[
        "hookSpecificOutput"
    ]
    assert specific == {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                        "permissionDecisionReason": "no token"}  # fmt: skip


def test_only_this_runners_grant_steps_are_taken_off() -> None:
    wrapped = shell_command("ls", WS)
    assert unwrapped(STEP + "; " + STEP + "; " + wrapped) == wrapped
    other = STEP.replace(os.path.dirname(sys.executable), "/tmp/evil", 1)
    assert unwrapped(other + "; " + wrapped) == other + "; " + wrapped
    assert unwrapped("echo hi; " + wrapped) == "echo hi; " + wrapped
    assert unwrapped("ls") == "ls"


@pytest.fixture
def token(tmp_path: Path) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    path = secrets / "admin-token"
    path.write_text("t" * 32 + "\n")
    return path


def test_file_tools_are_refused_the_token_and_what_lists_it(tmp_path: Path, token: Path) -> None:
    protected, cwd = str(token), str(tmp_path / "secrets")
    link = tmp_path / "link"
    link.symlink_to(token)
    refused = [
        ("Read", {"file_path": str(token)}), ("Read", {"file_path": str(link)}),
        ("Edit", {"file_path": "admin-token"}), ("Write", {"file_path": str(token)}),
        ("Grep", {"pattern": "t", "path": "/"}), ("Grep", {"pattern": "t", "path": str(tmp_path)}),
        ("Grep", {"pattern": "t"}), ("Glob", {"pattern": "*", "path": str(tmp_path / "secrets")}),
    ]  # fmt: skip
    for tool, tool_input in refused:
        assert touches(tool, tool_input, protected, cwd), (tool, tool_input)
    let_through = [
        ("Read", {"file_path": str(tmp_path / "other")}), ("Grep", {"pattern": "t", "path": str(tmp_path / "w")}),
        ("Bash", {"command": f"cat {token}"}), ("WebFetch", {"url": "file:///" + str(token)}),
    ]  # fmt: skip
    for tool, tool_input in let_through:
        assert not touches(tool, tool_input, protected, str(tmp_path / "w")), (tool, tool_input)


def test_settings_need_both_variables_and_an_existing_token_file(token: Path) -> None:
    both = {
        "HOOKRUNNER_APPROVALS_ADMIN": "http://127.0.0.1:9090/",
        "HOOKRUNNER_APPROVALS_TOKEN_FILE": str(token),
    }
    assert from_env(both) == BridgeSettings("http://127.0.0.1:9090", str(token))
    assert from_env({**both, "HOOKRUNNER_APPROVALS_TOKEN_FILE": "admin-token"}) is None
    assert from_env({**both, "HOOKRUNNER_APPROVALS_TOKEN_FILE": str(token) + ".gone"}) is None
    assert from_env({**both, "HOOKRUNNER_APPROVALS_TOKEN_FILE": str(token.parent)}) is None
    assert from_env({**both, "HOOKRUNNER_APPROVALS_ADMIN": "https://x"}) is None
    assert from_env({"HOOKRUNNER_APPROVALS_ADMIN": "http://127.0.0.1:9090"}) is None


def test_the_grant_step_reads_only_a_plausible_token_never_through_a_link(
    tmp_path: Path, token: Path
) -> None:
    assert read_token(str(token)) == "t" * 32
    link = tmp_path / "link"
    link.symlink_to(token)
    assert read_token(str(link)) is None
    (tmp_path / "short").write_text("abc")
    assert read_token(str(tmp_path / "short")) is None
    assert read_token(str(tmp_path / "missing")) is None
