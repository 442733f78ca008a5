"""The bridge's word where ``fire`` has no boundary to wrap Bash in (issue 47, D503):
the ask still names the host and says why a yes cannot grant; nothing is wrapped. Run in
process (``ax.cli._claude_answer`` on a session's result), the proxy a loopback stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax import cli, firebound
from sandbox_egress.hookrunner.ax.events import parse_event
from tests.hookrunner.ax.conftest import AxEnv, ax  # noqa: F401 (fixture)
from tests.hookrunner.bridge.conftest import StandIn


def test_without_a_boundary_a_bash_call_to_a_held_host_is_still_asked(
    ax: AxEnv,  # noqa: F811 (the fixture)
    stand_in: StandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = tmp_path / "admin-token"
    token.write_text("t" * 32)
    monkeypatch.setenv("HOOKRUNNER_APPROVALS_ADMIN", "http://127.0.0.1:9")
    monkeypatch.setenv("HOOKRUNNER_APPROVALS_TOKEN_FILE", str(token))
    monkeypatch.setenv("http_proxy", stand_in.url)
    monkeypatch.setattr(firebound, "first_notice", lambda session_id: None)
    stand_in.script[("POST", "/v1/access-requests")] = [(202, {"id": "ap-00000000000000bb"})]
    session = ax.session()
    payload = {
        "session_id": "ses_test", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": "curl https://new.example/"}, "cwd": str(ax.workspace),
        "permission_mode": "default",
    }  # fmt: skip
    inp = parse_event("PreToolUse", payload, session_id="ses_test")
    answer = cli._claude_answer(session.fire_input(inp), inp, "", session, as_json=True)
    assert answer == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": (
                "This call reaches new.example:443, which the egress proxy does not allow for "
                "this sandbox. Yes sends it on to wait there for an operator's approval "
                "(ap-00000000000000bb); with no boundary here the admin token cannot be kept "
                "from the agent."
            ),
        }
    }
