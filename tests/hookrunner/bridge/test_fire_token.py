"""The approvals bridge's admin token stays out of the agent's reach (issue 47, D505).

``hookrunner fire PreToolUse --claude-exit-codes`` with the bridge configured
(``HOOKRUNNER_APPROVALS_ADMIN``, ``HOOKRUNNER_APPROVALS_TOKEN_FILE``), its
``updatedInput`` run as Claude Code 2.1.332 runs a Bash call (``test_fire_boundary``'s
``Claude``): the token file reads as empty inside every Bash call, a grant step the agent
writes itself runs inside the boundary and finds no token, and Claude Code's own file
tools are refused the file. Without the bridge the same ``cat`` shows the file: the mask
is the bridge's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.bridge.grant import command
from sandbox_egress.hookrunner.bridge.judge import TOKEN_REFUSED
from sandbox_egress.hookrunner.enforce.bound import package_root
from tests.hookrunner.ax.test_fire_boundary import Claude
from tests.hookrunner.bridge.conftest import StandIn
from tests.hookrunner.helpers import HOOKRUNNER

TOKEN = "admin-token-0123456789abcdef"

pytestmark = pytest.mark.privileged


@pytest.fixture
def claude() -> Iterator[Claude]:
    top = Path(tempfile.mkdtemp(prefix="hr-bridge-token-"))
    try:
        yield Claude(top)
    finally:
        shutil.rmtree(top)


def bridged(claude: Claude) -> Path:
    """The bridge configured (an admin address nobody serves: nothing here may reach it)."""
    secrets = claude.top / "secrets"
    secrets.mkdir()
    token = secrets / "admin-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    claude.env.update(
        HOOKRUNNER_APPROVALS_ADMIN="http://127.0.0.1:9", HOOKRUNNER_APPROVALS_TOKEN_FILE=str(token)
    )
    return token


def test_without_the_bridge_a_bash_call_reads_the_file(claude: Claude) -> None:
    token = claude.top / "admin-token"
    token.write_text(TOKEN + "\n")
    status, out, _, _ = claude.bash(claude.updated(f"cat {token}")["command"])
    assert (status, out) == (0, TOKEN + "\n")


def test_with_the_bridge_every_bash_call_finds_the_token_masked(claude: Claude) -> None:
    token = bridged(claude)
    for spelled in (
        f"cat {token}",
        f"T={token.parent}; cat $T/admin-*",
        "cat ../secrets/admin-token",
    ):
        updated = claude.updated(spelled)
        status, out, err, _ = claude.bash(updated["command"])
        assert (status, out) == (0, ""), (spelled, err)
        assert TOKEN not in updated["command"]


def test_a_grant_step_the_agent_writes_runs_inside_the_boundary_and_finds_no_token(
    claude: Claude,
) -> None:
    token = bridged(claude)
    step = command(
        sys.executable, package_root(), "http://127.0.0.1:9", str(token), "ap-x", "new.example:443"
    )
    status, out, err, _ = claude.bash(claude.updated(step + "; echo after")["command"])
    assert (status, out) == (0, "after\n")
    assert err == "hookrunner bridge: new.example:443 not granted: no admin token readable here\n"


def pre(
    claude: Claude, tool: str, tool_input: dict[str, Any], mode: str = "default"
) -> dict[str, Any]:
    payload = {
        "session_id": "ses_bridge", "transcript_path": str(claude.top / "t.jsonl"),
        "cwd": str(claude.workspace), "permission_mode": mode,
        "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input,
        "tool_use_id": "toolu_01bridge",
    }  # fmt: skip
    done = subprocess.run(
        [HOOKRUNNER, "fire", "PreToolUse", "--claude-exit-codes", "--claude-json",
         "--workspace", str(claude.workspace), "--ax-config", str(claude.operator)],
        input=json.dumps(payload), capture_output=True, text=True, env=claude.env,
        cwd=claude.workspace, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout)) if done.stdout.strip() else {}


def test_claude_codes_file_tools_are_refused_the_token(claude: Claude) -> None:
    token = bridged(claude)
    refused = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": TOKEN_REFUSED,
    }
    assert pre(claude, "Read", {"file_path": str(token)})["hookSpecificOutput"] == refused
    assert (
        pre(claude, "Grep", {"pattern": "a", "path": str(claude.top)})["hookSpecificOutput"]
        == refused
    )
    assert pre(claude, "Read", {"file_path": str(claude.workspace / "f")}) == {}


def test_a_yes_carries_the_grant_only_where_a_person_answers_under_a_boundary(
    claude: Claude, stand_in: StandIn
) -> None:
    """The ask names the host in every mode; the grant step rides only in Bash's
    updatedInput, and not in a mode where no person answers (D507)."""
    bridged(claude)
    claude.env["http_proxy"] = stand_in.url
    held = (202, {"id": "ap-00000000000000aa", "state": "pending"})
    stand_in.script[("POST", "/v1/access-requests")] = [held] * 4
    fetch_cmd = "curl -s https://new.example/x"
    asked = pre(claude, "Bash", {"command": fetch_cmd})["hookSpecificOutput"]
    assert asked["permissionDecision"] == "ask"
    assert asked["permissionDecisionReason"] == (
        "This command reaches new.example:443, which the egress proxy does not allow for this "
        "sandbox. Yes lets it through once, for this sandbox only (approval ap-00000000000000aa)."
    )
    python = asked["updatedInput"]["command"].split(" ", 1)[0]  # the runner's interpreter
    step = command(
        python, package_root(), "http://127.0.0.1:9", claude.env["HOOKRUNNER_APPROVALS_TOKEN_FILE"],
        "ap-00000000000000aa", "new.example:443",
    )  # fmt: skip
    assert asked["updatedInput"]["command"].startswith(step + "; { __hookrunner_cwd=")
    for mode in ("bypassPermissions", "auto"):
        unasked = pre(claude, "Bash", {"command": fetch_cmd}, mode)["hookSpecificOutput"]
        assert unasked["permissionDecision"] == "ask"
        assert unasked["permissionDecisionReason"].endswith(
            f"in permission mode {mode!r} the answer may not be a person's."
        )
        assert unasked["updatedInput"]["command"].startswith("{ __hookrunner_cwd=")
    fetch = pre(claude, "WebFetch", {"url": "https://new.example/x", "prompt": "p"})
    assert fetch["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert "updatedInput" not in fetch["hookSpecificOutput"]
    assert [seen["body"]["host"] for seen in stand_in.seen] == ["new.example"] * 4
