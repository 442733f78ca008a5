"""http handlers of Claude Code settings files: through the egress proxy, headers limited."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.test_claude_settings import Claude
from tests.hookrunner.net_support import Reply, connect_proxy, https_server
from tests.hookrunner.tls_support import Pki

DENY = json.dumps(
    {"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no"}}
).encode()
CALL = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "session_id": "s1"}


def http_settings(url: str, **handler: Any) -> dict[str, Any]:
    hook = {"type": "http", "url": url, **handler}
    return {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}


def fire(claude: Claude, pki: Pki, **environ: str) -> Any:
    session = claude.ax.session(
        environ=claude.ax.environ(HOME=str(claude.home), SSL_CERT_FILE=str(pki.ca_file), **environ),
        managed_settings=claude.managed,
    )
    return session.fire("PreToolUse", CALL)


@pytest.fixture
def claude(ax: AxEnv) -> Claude:
    return Claude(ax)


def test_an_http_hook_is_posted_through_the_proxy_and_its_answer_decoded(
    claude: Claude, pki: Pki
) -> None:
    with https_server(pki.server_context(), Reply(200, DENY)) as server, connect_proxy() as proxy:
        claude.write(
            "user",
            http_settings(
                f"{server.url}/hook",
                headers={"Authorization": "Bearer $HOOK_TOKEN", "X-Other": "${NOT_LISTED}-x"},
                allowedEnvVars=["HOOK_TOKEN"],
            ),
        )
        result = fire(claude, pki, HTTPS_PROXY=proxy.url, HOOK_TOKEN="t0ken", NOT_LISTED="leak")
    assert (result.decision.value, result.cause.value, result.reason) == (
        "deny",
        "permission_deny",
        "no",
    )
    assert proxy.connects == [f"127.0.0.1:{server.port}"]
    [request] = server.received
    assert request.headers["authorization"] == "Bearer t0ken"
    assert request.headers["x-other"] == "-x"
    body = json.loads(request.body)
    assert (body["hook_event_name"], body["tool_name"], body["tool_input"]) == (
        "PreToolUse",
        "Bash",
        {"command": "ls"},
    )


def test_a_failing_http_hook_never_blocks(claude: Claude, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(500, DENY)) as server:
        claude.write("user", http_settings(server.url))
        result = fire(claude, pki)
    assert (result.decision.value, result.runs[0].outcome.value) == ("allow", "http_error")


def test_managed_allowed_http_hook_urls_limit_the_urls(claude: Claude, pki: Pki) -> None:
    with https_server(pki.server_context(), Reply(200, DENY)) as server:
        claude.write("managed", {"allowedHttpHookUrls": ["https://hooks.example.com/*"]})
        claude.write("user", http_settings(f"{server.url}/hook"))
        result = fire(claude, pki)
        assert (result.cause.value, server.received) == ("no_hooks", [])
        claude.write("managed", {"allowedHttpHookUrls": [f"{server.url}/*"]})
        assert fire(claude, pki).decision.value == "deny"
    notices = [w["cause"] for w in claude.ax.warnings() if w["kind"] == "config"]
    assert any("not in the managed allowedHttpHookUrls" in n for n in notices)


def test_validate_flags_a_literal_secret_in_headers_of_either_dialect(claude: Claude) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    claude.write(
        "user",
        http_settings("https://hooks.example.com/x", headers={"Authorization": f"Bearer {token}"}),
    )
    agents = claude.ax.workspace / ".agents" / "hooks.json"
    agents.parent.mkdir()
    handler = {"type": "http", "url": "https://a.example.com/", "headers": {"X-Key": token}}
    agents.write_text(
        json.dumps({"audit": {"pre_tool_execution": [{"matcher": "*", "hooks": [handler]}]}})
    )
    done = claude.validate()
    assert done.returncode == 1
    lines = sorted(done.stdout.splitlines())
    assert {line.split(": ")[1] for line in lines} == {
        '$.audit.pre_tool_execution[0].hooks[0].headers["X-Key"]',
        "$.hooks.PreToolUse[0].hooks[0].headers.Authorization",
    }
    assert all("holds a literal credential (" in line for line in lines)
    assert token not in done.stdout + done.stderr


def test_prompt_and_agent_handlers_are_warned_at_run_time(claude: Claude, tmp_path: Path) -> None:
    claude.write(
        "user",
        {
            "hooks": {
                "Stop": [{"hooks": [{"type": "prompt", "prompt": "done?"}, {"type": "agent"}]}]
            }
        },
    )
    session = claude.session()
    assert session.fire("Stop", {}).cause.value == "no_hooks"
    causes = [w["cause"] for w in claude.ax.warnings() if w["kind"] == "config"]
    assert sum("this hook never runs" in c for c in causes) == 2
