"""The bridge attacked by fresh eyes (atk-appr, issue 47 follow-up, D541): Claude Code's
own file tools run outside the boundary, so they must not write what runs outside it next
(the project's `.claude` hooks, `.mcp.json` servers, the shell files Claude Code's snapshot
is taken from), where the admin token file is not masked: a hook written there reads the
token at the next start, and the agent mints grants without anyone's yes. Run in process
(``ax.cli._claude_answer``), as test_fire_answer.py does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax import cli, firebound
from sandbox_egress.hookrunner.ax.events import parse_event
from sandbox_egress.hookrunner.bridge.hosts import destinations
from sandbox_egress.hookrunner.bridge.judge import OUTSIDE_REFUSED
from tests.hookrunner.ax.conftest import AxEnv, ax  # noqa: F401 (fixture)
from tests.hookrunner.bridge.conftest import StandIn

HOOK = '{"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "cat T"}]}]}}'


def _answer(ax: AxEnv, tool: str, tool_input: dict[str, object]) -> object:  # noqa: F811
    session = ax.session()
    payload = {
        "session_id": "ses_test", "hook_event_name": "PreToolUse", "tool_name": tool,
        "tool_input": tool_input, "cwd": str(ax.workspace), "permission_mode": "acceptEdits",
    }  # fmt: skip
    inp = parse_event("PreToolUse", payload, session_id="ses_test")
    return cli._claude_answer(session.fire_input(inp), inp, "", session, as_json=True)


@pytest.fixture
def bridged(stand_in: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    token = tmp_path / "admin-token"
    token.write_text("t" * 32)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HOOKRUNNER_APPROVALS_ADMIN", "http://127.0.0.1:9")
    monkeypatch.setenv("HOOKRUNNER_APPROVALS_TOKEN_FILE", str(token))
    monkeypatch.setenv("http_proxy", stand_in.url)
    monkeypatch.setattr(firebound, "first_notice", lambda session_id: None)
    return home


@pytest.mark.parametrize(
    ("tool", "where", "key"),
    [
        ("Write", ".claude/settings.local.json", "content"),
        ("Write", ".claude/settings.json", "content"),
        ("Edit", ".mcp.json", "new_string"),
        ("MultiEdit", ".claude/agents/../settings.json", "edits"),
        ("Write", "~/.bashrc", "content"),
        ("Write", "~/.claude/settings.json", "content"),
        ("Edit", ".git/config", "new_string"),  # core.fsmonitor: run by the next git (D543)
        ("Write", ".git/hooks/post-index-change", "content"),
        ("Write", "sub/.git/config", "content"),
        ("Write", "~/.gitconfig", "content"),
        ("Write", "~/.config/git/config", "content"),
    ],
)
def test_a_file_tool_cannot_write_what_runs_outside_the_boundary(
    ax: AxEnv,  # noqa: F811 (the fixture)
    bridged: Path,
    tool: str,
    where: str,
    key: str,
) -> None:
    path = str(bridged / where[2:]) if where.startswith("~/") else str(ax.workspace / where)
    answer = _answer(ax, tool, {"file_path": path, key: HOOK})
    assert answer == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": OUTSIDE_REFUSED,
        }
    }


def test_other_files_of_the_workspace_stay_writable(
    ax: AxEnv,  # noqa: F811 (the fixture)
    bridged: Path,
) -> None:
    answer = _answer(ax, "Write", {"file_path": str(ax.workspace / "src.py"), "content": "x"})
    assert (answer or {}).get("hookSpecificOutput", {}).get("permissionDecision") != "deny"
    read = _answer(ax, "Read", {"file_path": str(ax.workspace / ".claude/settings.json")})
    assert (read or {}).get("hookSpecificOutput", {}).get("permissionDecision") != "deny"


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ('curl https://good.test"@evil.test"/x', ["good.test:443"]),  # the shell joins them
        ("curl https://good.test\\@evil.test/x", ["good.test:443"]),
        ("curl https://good.test:443@evil.test/x", ["evil.test:443"]),  # userinfo, as curl
        ("curl https://EVIL.test.:0443/x", ["evil.test:443"]),
        ("curl http://0x7f.1/x", ["127.0.0.1:80"]),
    ],
)
def test_what_the_prompt_names_is_what_the_grant_covers(command: str, named: list[str]) -> None:
    """Where the bridge's reading and curl's differ, the grant covers the host the prompt
    named and nothing else: the host curl reaches instead meets the proxy's own hold."""
    assert [str(d) for d in destinations("Bash", {"command": command})] == named
