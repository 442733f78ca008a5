"""The approvals bridge under the REAL Claude Code CLI and a real egress proxy (issue 47,
its last bullet, D500-D506).

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
import os
import secrets
import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import procs
from testbed.claude_code import HOOKRUNNER, REPO, ClaudeHome, stop_warm_runners
from testbed.netns import Namespaces, netns_available
from testbed.nsock import in_namespace
from testbed.proxyproc import ProxyProcess, start_proxy
from tests.hookrunner.ax.test_claude_cli import claude  # noqa: F401 (fixture)

pytestmark = pytest.mark.netns

UPLINK, UPSTREAM = "198.18.47.1", "198.18.47.2"
PROXY_PORT, METRICS_PORT = 18047, 19047
EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
CONFIG = f"""
network:
  allowlist:
    - domain: "{UPSTREAM}/32"
approvals:
  unknown: hold
  timeout: 4s
  max_pending: 5
  scopes: [once]
"""


def bash(command: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "step"}}}


class World:
    """The namespace, its echo server and proxy, and the user's Claude Code home."""

    def __init__(self, root: Path, cli: Path) -> None:
        self.root = root
        self.namespaces = Namespaces(f"cb{os.getpid() % 100000}")
        self.ns = f"{self.namespaces.tag}m"
        self.children: list[procs.Child] = []
        self.home = ClaudeHome(root / "user", cli, self.ns)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        root = self.root
        self.namespaces.add_namespaces(self.ns)
        self.namespaces.write_etc(
            self.ns, [(UPSTREAM, "new.example"), (UPSTREAM, "other.example")], "127.0.0.1"
        )
        upstream = f"{self.namespaces.tag}u"  # the echo's own namespace: not the proxy's host
        self.namespaces.add_namespaces(upstream)
        self.namespaces.add_veth(
            self.ns, f"{self.namespaces.tag}x", upstream, f"{self.namespaces.tag}y"
        )
        self.namespaces.link_up(self.ns, f"{self.namespaces.tag}x", f"{UPLINK}/30")
        self.namespaces.link_up(upstream, f"{self.namespaces.tag}y", f"{UPSTREAM}/30")
        self.echo_log = root / "echo.jsonl"
        ready = root / "echo.ready"
        echo = procs.start(
            "echo",
            ["ip", "netns", "exec", upstream, sys.executable, "-m", "testbed.echo_server",
             "--log", str(self.echo_log), "--ready", str(ready), "--echo", f"{UPSTREAM}:80"],
            root, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        self.children.append(echo)
        procs.wait_until("the echo server", ready.exists, 30, echo)
        self.secrets = root / "secrets"
        self.secrets.mkdir()
        self.token = self.secrets / "admin-token"
        self.token.write_text(secrets.token_hex(24) + "\n")
        self.token.chmod(0o600)
        config = root / "egress.yaml"
        config.write_text(CONFIG)
        self.proxy: ProxyProcess = start_proxy(
            "proxy", ["ip", "netns", "exec", self.ns], EGRESS_PROXY, config,
            ["--listen", f"127.0.0.1:{PROXY_PORT}", "--metrics", f"127.0.0.1:{METRICS_PORT}",
             "--admin-token-file", str(self.token), "--certs", str(root / "certs")],
            root, {"PATH": "/usr/bin:/bin"}, self.metrics_socket,
        )  # fmt: skip
        self.children.append(self.proxy.child)

    def metrics_socket(self) -> socket.socket:
        with in_namespace(self.ns):
            sock = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=10)
        return sock

    def approvals(self) -> dict[str, Any]:
        """``GET /approvals`` with the token, from inside the namespace."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{METRICS_PORT}/approvals",
            headers={"Authorization": f"Bearer {self.token.read_text().strip()}"},
        )
        with in_namespace(self.ns):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            conn = opener.open(request, timeout=10)
        with conn:
            found: dict[str, Any] = json.loads(conn.read())
        return found

    def echoed(self) -> list[dict[str, Any]]:
        lines = self.echo_log.read_text().splitlines() if self.echo_log.exists() else []
        return [e for e in map(json.loads, lines) if e["event"] == "request"]

    def close(self) -> None:
        for child in reversed(self.children):
            child.stop()
        stop_warm_runners(self.home.run_dir)
        assert self.namespaces.close() == []


@pytest.fixture
def world(tmp_path: Path, claude: Path) -> Iterator[World]:  # noqa: F811
    if (reason := netns_available()) is not None:
        pytest.fail(reason)
    (tmp_path / "user").mkdir()
    made = World(tmp_path, claude)
    try:
        yield made
    finally:
        made.close()


def test_the_users_yes_is_a_once_grant_and_a_no_or_a_replay_never_is(world: World) -> None:
    user = world.home
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
