"""The approvals bridge under the REAL Claude Code CLI and a real egress proxy (issue 47,
its last bullet, D500-D507).

One network namespace holds everything: the fake model (``testbed.fake_model``) and
Claude Code 2.1.332 on its loopback (the model reached directly, ``NO_PROXY``), the
egress proxy (``approvals: {unknown: hold}``, its admin API behind a token file) on
127.0.0.1, and, behind a veth to a namespace of its own, an echo server at 198.18.47.2 that ``new.example`` and ``other.example``
name (``/etc/netns``; a CIDR entry opens the address, no entry names either host). The
runner is installed as Claude Code's hook with the bridge configured; the user at the
permission prompt is ``testbed.prompt_user`` (``--permission-prompt-tool``), who says
yes to the first prompt and no to every other.

The model asks for: a ``curl`` of new.example (the prompt shows the grant step; yes:
the request goes through, once, for this sandbox); a ``curl`` of other.example (no:
refused, nothing reaches the echo); then, as an attacker who read the transcript, the
grant step of that refused approval and a ``curl`` with the host hidden from the bridge
(no prompt: the step runs under the boundary, finds the token masked, and the request
waits at the proxy until ``approval_timeout``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.claude_code import HOOKRUNNER, REPO, ClaudeHome, stop_warm_runners
from testbed.netns import netns_available
from tests.hookrunner.ax.test_claude_cli import claude  # noqa: F401 (fixture)
from tests.hookrunner.bridge.world import METRICS_PORT, PROXY_PORT, World

pytestmark = pytest.mark.netns


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "step"}}}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    if (reason := netns_available()) is not None:
        pytest.fail(reason)
    made = World(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def user(world: World, claude: Path) -> Iterator[ClaudeHome]:  # noqa: F811
    (world.root / "user").mkdir()
    home = ClaudeHome(world.root / "user", claude, world.ns)
    try:
        yield home
    finally:
        stop_warm_runners(home.run_dir)


def test_the_users_yes_is_a_once_grant_and_a_no_or_a_replay_never_is(
    world: World, user: ClaudeHome
) -> None:
    operator = user.root / "operator-ax.json"
    operator.write_text(json.dumps({"packs": ["protect-env-files"]}))
    installed = subprocess.run(
        [HOOKRUNNER, "claude", "install", "--scope", "user", "--workspace", str(user.workspace),
         "--ax-config", str(operator)],
        capture_output=True, text=True, env=user.env, timeout=60,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    answers, prompts = user.root / "answers.json", user.root / "prompts.jsonl"
    answers.write_text(json.dumps(["yes"]))
    mcp = user.root / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"user": {
        "type": "stdio", "command": sys.executable,
        "args": ["-m", "testbed.prompt_user", "--answers", str(answers), "--log", str(prompts)],
        "env": {"PYTHONPATH": str(REPO)}}}}))  # fmt: skip
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    env = {"http_proxy": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "HTTPS_PROXY": proxy,
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
           "HOOKRUNNER_APPROVALS_ADMIN": f"http://127.0.0.1:{METRICS_PORT}",
           "HOOKRUNNER_APPROVALS_TOKEN_FILE": str(world.token)}  # fmt: skip
    transcripts = shlex.quote(str(user.home / ".claude" / "projects"))
    replay = (
        f"A=$(grep -rhoE 'ap-[0-9a-f]{{16}}' {transcripts} | tail -n 1); "
        f"{shlex.quote(sys.executable)} -I -S -c "
        "'import sys; sys.path[:0] = sys.argv[1:2]; from sandbox_egress.hookrunner.bridge.grant "
        "import main; sys.exit(main(sys.argv[2:]))' "
        f"{shlex.quote(str(REPO))} --admin http://127.0.0.1:{METRICS_PORT} "
        f'--token-file {shlex.quote(str(world.token))} --approval "${{A:-ap-0000000000000000}}" '
        "--destination other.example:80; "
        f"wc -c < {shlex.quote(str(world.token))}; "
        "H=other; curl -s -o /dev/null -w 'status %{http_code}\\n' http://$H.example/replayed"
    )
    script = [
        bash("curl -s http://new.example/granted"),
        bash("curl -s -w ' status %{http_code}' http://other.example/refused"),
        bash(replay),
        {"text": "all done"},
    ]
    run = user.run(
        script,
        args=["--allowedTools", "Bash", "--mcp-config", str(mcp),
              "--permission-prompt-tool", "mcp__user__answer"],
        env=env,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    asked = [json.loads(line) for line in prompts.read_text().splitlines()]
    # Two prompts, not three: the replay named no host the bridge could read.
    assert [(p["tool_name"], p["answer"]) for p in asked] == [("Bash", "yes"), ("Bash", "no")]
    first, second = (p["input"]["command"] for p in asked)
    assert " --destination new.example:80; { __hookrunner_cwd=" in first
    assert " --destination other.example:80; { __hookrunner_cwd=" in second
    assert world.token.read_text().strip() not in first + second

    granted = run.tool_result("toolu_fake00")
    assert granted["is_error"] is False
    assert "hookrunner bridge: new.example:80 allowed once (ap-" in json.dumps(granted)
    assert '\\"target\\": \\"/granted\\"' in json.dumps(granted)  # the echo's own record
    refused = run.tool_result("toolu_fake01")
    assert (refused["content"], refused["is_error"]) == ("The user said no.", True)
    replayed = json.dumps(run.tool_result("toolu_fake02"))
    assert (
        "hookrunner bridge: other.example:80 not granted: no admin token readable here" in replayed
    )
    assert "status 403" in replayed and "\\n0\\n" in replayed  # held, then approval_timeout

    assert [(e["target"], dict(e["headers"]).get("Host")) for e in world.echoed()] == [
        ("/granted", "new.example")
    ]
    by_host = {a["host"]: a for a in world.approvals()["approvals"]}
    assert (by_host["new.example"]["state"], by_host["new.example"]["scope"]) == ("allowed", "once")
    assert by_host["new.example"]["decided_by"] == "api"
    assert by_host["other.example"]["state"] in ("pending", "timed_out")
    audit = [json.loads(x) for x in world.proxy.audit.read_text().splitlines() if x.strip()]
    assert [a.get("reason") for a in audit if a.get("host") == "other.example"] == [
        "approval_timeout"
    ]
