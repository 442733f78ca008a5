"""`hookrunner claude install` under the REAL Claude Code CLI (issue 35, D229, D240-D243).

The npm package `@anthropic-ai/claude-code` (its native binary) is installed by the test
into `.cache/claude-code` of the repository, once, with npm. Only the model is mocked:
`testbed.fake_model`, a local server speaking the Anthropic Messages API, scripted to ask
for Bash `echo hi`, then for a command the user's guard forbids, then to answer in text.
The CLI and the fake model run in a network namespace the test creates, with nothing but
its loopback (no traffic can go anywhere else), telemetry and updates switched off.

A user's settings.json holds four hooks: a PreToolUse guard (exit 2 and a reason on
`rm -rf`), a PostToolUse and a Stop logger, and a UserPromptSubmit hook that adds context.
After `hookrunner claude install`, `claude -p` must: run the allowed command, block the
forbidden one with the guard's reason reaching the model (in the next request the fake
model gets), run every one of the user's hooks once, and show no hook problem: Claude Code
2.1.x reports a hook's unusable answer (the runner's old `{"decision": "allow"}`) as a
`system` message tagged `hook_no_verdict` in its stream, and a failing hook as a
`hook_non_blocking_error` in its session transcript.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import procs
from testbed.netns import Namespaces, netns_available
from tests.hookrunner.ax.test_quickfire import stop_servers
from tests.hookrunner.helpers import HOOKRUNNER, PY

pytestmark = pytest.mark.netns

VERSION = "2.1.332"  # the Claude Code release this test was written against
CACHE = Path(__file__).resolve().parents[3] / ".cache" / "claude-code"
NPM_TIMEOUT = 600.0
RUN_TIMEOUT = 180.0

GUARD = (
    "import json, sys\n"
    "d = json.load(sys.stdin)\n"
    "command = d.get('tool_input', {}).get('command', '')\n"
    "open(sys.argv[1], 'a').write(f\"{d['hook_event_name']} {command}\".strip() + '\\n')\n"
    "if 'rm -rf' in command:\n"
    "    print('rm -rf is not allowed here', file=sys.stderr); sys.exit(2)\n"
)
CONTEXT = "Context from the user's hook: the build is green."
PROMPT_HOOK = GUARD.split("if 'rm")[0] + f"print({CONTEXT!r})\n"
SCRIPT: list[dict[str, Any]] = [
    {"tool_use": {"name": "Bash", "input": {"command": "echo hi", "description": "greet"}}},
    {"tool_use": {"name": "Bash", "input": {"command": "rm -rf victim", "description": "clean"}}},
    {"text": "all done"},
]
OFFLINE = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def claude_binary() -> Path:
    """The CLI's native binary, installed into CACHE by npm when missing or of another
    version (a binary shipped inside the registry's platform package)."""

    def found() -> Path | None:
        for path in [
            *CACHE.glob("node_modules/@anthropic-ai/claude-code-linux-*/claude"),
            CACHE / "node_modules" / ".bin" / "claude",
        ]:
            if path.is_file() and os.access(path, os.X_OK):
                done = subprocess.run(
                    [path, "--version"], capture_output=True, text=True, timeout=60
                )
                if done.stdout.startswith(VERSION + " "):
                    return path
        return None

    if (path := found()) is not None:
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--no-save",
         f"@anthropic-ai/claude-code@{VERSION}"],
        check=True, capture_output=True, timeout=NPM_TIMEOUT,
    )  # fmt: skip
    if (path := found()) is None:
        raise RuntimeError(f"npm installed no runnable Claude Code {VERSION} under {CACHE}")
    return path


@pytest.fixture(scope="module")
def claude() -> Path:
    if (reason := netns_available()) is not None:
        pytest.fail(reason)
    return claude_binary()


@pytest.fixture
def netns() -> Iterator[str]:
    namespaces = Namespaces(f"cc{os.getpid() % 100000}")
    name = f"{namespaces.tag}m"
    try:
        namespaces.add_namespaces(name)
        yield name
    finally:
        assert namespaces.close() == []


@dataclass
class Run:
    """What one `claude -p` run left: its stream, stderr, the requests the fake model got,
    the session transcript, and the lines the user's hooks wrote."""

    code: int
    stream: list[dict[str, Any]]
    stderr: str
    requests: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    hooks_ran: list[str]

    def tool_result(self, tool_use_id: str) -> dict[str, Any]:
        """The tool result the model was sent for `tool_use_id` (in the next request)."""
        for request in self.requests:
            for message in request["body"]["messages"]:
                for block in message["content"] if isinstance(message["content"], list) else []:
                    if block.get("tool_use_id") == tool_use_id:
                        return dict(block)
        raise AssertionError(f"the model never got a result for {tool_use_id}")

    def hook_problems(self) -> list[Any]:
        """Every hook error or warning Claude Code showed, but the guard's own block."""
        problems: list[Any] = [
            m for m in self.stream
            if m["type"] == "system"
            and (m["subtype"] not in ("init", "hook_started", "hook_response")
                 or m.get("outcome", "success") != "success")
        ]  # fmt: skip
        problems += [
            e["attachment"] for e in self.transcript
            if "hook" in e.get("attachment", {}).get("type", "")
            and e["attachment"]["type"] not in ("hook_additional_context", "hook_success")
        ]  # fmt: skip
        text = json.dumps(self.stream) + self.stderr + json.dumps(self.transcript)
        if "validation failed" in text.lower():
            problems.append("Hook JSON output validation failed")
        return problems


class ClaudeHome:
    """A user's home, workspace and hooks, and `claude -p` run on them in `netns`."""

    def __init__(self, root: Path, claude: Path, netns: str) -> None:
        self.root, self.claude, self.netns = root, claude, netns
        self.home = root / "home"
        self.workspace = root / "workspace"
        (self.workspace / "victim").mkdir(parents=True)  # what `rm -rf victim` would delete
        self.run_dir = Path(tempfile.mkdtemp(prefix="hr-"))  # short: a socket path's limit
        self.log = root / "ran.log"
        # A user who accepted the workspace's trust dialog once (its project settings apply).
        trusted = {"projects": {str(self.workspace): {"hasTrustDialogAccepted": True}}}
        self.home.mkdir()
        (self.home / ".claude.json").write_text(json.dumps(trusted))
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
                    "XDG_RUNTIME_DIR": str(self.run_dir), **OFFLINE}  # fmt: skip

    def four_hooks(self) -> dict[str, Any]:
        scripts = self.root / "scripts"
        scripts.mkdir(exist_ok=True)
        (scripts / "guard.py").write_text(GUARD)
        (scripts / "log.py").write_text(PROMPT_HOOK)
        guard = f"{PY} -I -S {scripts / 'guard.py'} {self.log}"
        logger = f"{PY} -I -S {scripts / 'log.py'} {self.log}"

        def entry(matcher: str, command: str) -> list[dict[str, Any]]:
            return [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]

        hooks = {"PreToolUse": entry("Bash", guard), "PostToolUse": entry("Bash", guard),
                 "Stop": entry("", logger), "UserPromptSubmit": entry("", logger)}  # fmt: skip
        return {"hooks": hooks, "permissions": {"allow": ["Bash(echo:*)"]}}

    def write_settings(self, scope: str) -> Path:
        base = self.home if scope == "user" else self.workspace
        path = base / ".claude" / "settings.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.four_hooks()))
        return path

    def install(self, scope: str) -> subprocess.CompletedProcess[str]:
        command = [HOOKRUNNER, "claude", "install", "--scope", scope,
                   "--workspace", str(self.workspace)]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=60)

    def run(self, script: list[dict[str, Any]]) -> Run:
        """The fake model, then `claude -p` against it, both inside the namespace."""
        (self.root / "script.json").write_text(json.dumps(script))
        files = {name: self.root / name for name in ("model.log", "ready", "port")}
        model = procs.start(
            "fake-model",
            ["ip", "netns", "exec", self.netns, sys.executable, "-m", "testbed.fake_model",
             "--log", str(files["model.log"]), "--ready", str(files["ready"]),
             "--port-file", str(files["port"]), "--script", str(self.root / "script.json")],
            self.root,
        )  # fmt: skip
        try:
            procs.wait_until("the fake model", files["ready"].exists, 30, model)
            port = int(files["port"].read_text())
            env = {**self.env, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
                   "ANTHROPIC_API_KEY": "sk-ant-dummy-not-a-key"}  # fmt: skip
            done = subprocess.run(
                ["ip", "netns", "exec", self.netns, "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                 str(self.claude), "-p", "Say hi, then clean up.", "--output-format", "stream-json",
                 "--verbose", "--allowedTools", "Bash"],
                cwd=self.workspace, capture_output=True, text=True, timeout=RUN_TIMEOUT,
            )  # fmt: skip
        finally:
            model.stop()
            stop_servers(self.run_dir, tries=50)
        transcripts = list((self.home / ".claude" / "projects").glob("*/*.jsonl"))
        return Run(
            code=done.returncode,
            stream=[json.loads(line) for line in done.stdout.splitlines() if line.strip()],
            stderr=done.stderr,
            requests=[json.loads(x) for x in files["model.log"].read_text().splitlines()],
            transcript=[json.loads(x) for p in transcripts for x in p.read_text().splitlines()],
            hooks_ran=self.log.read_text().splitlines() if self.log.exists() else [],
        )


@pytest.fixture
def user(tmp_path: Path, claude: Path, netns: str) -> Iterator[ClaudeHome]:
    home = ClaudeHome(tmp_path, claude, netns)
    yield home
    stop_servers(home.run_dir, tries=50)


def assert_guarded(run: Run, workspace: Path) -> None:
    """The allowed call ran, the forbidden one was blocked with the guard's reason, each of
    the user's hooks ran once, and Claude Code showed no hook problem."""
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    assert run.hooks_ran == [
        "UserPromptSubmit", "PreToolUse echo hi", "PostToolUse echo hi",
        "PreToolUse rm -rf victim", "Stop",
    ]  # fmt: skip
    assert run.tool_result("toolu_fake00")["content"] == "hi"
    blocked = run.tool_result("toolu_fake01")
    # Claude Code's own words for an exit-2 block: "EVENT:TOOL hook error: [COMMAND]: REASON".
    assert blocked["is_error"] is True
    assert blocked["content"].startswith("PreToolUse:Bash hook error: [")
    assert blocked["content"].endswith("]: rm -rf is not allowed here\n")
    assert (workspace / "victim").is_dir()
    first = json.dumps(run.requests[0]["body"])
    assert f"UserPromptSubmit hook additional context: {CONTEXT}" in first
    assert run.hook_problems() == []
    assert [m["message"]["content"][0].get("text") for m in run.stream if m["type"] == "assistant"][
        -1
    ] == "all done"


def test_the_real_cli_runs_the_users_four_hooks_through_the_runner(user: ClaudeHome) -> None:
    settings = user.write_settings("user")
    done = user.install("user")
    assert done.returncode == 0, done.stderr
    installed = json.loads(settings.read_text())["hooks"]
    assert all("fire" in g[0]["hooks"][0]["command"] for g in installed.values())
    assert_guarded(user.run(SCRIPT), user.workspace)


def test_project_scope_moves_the_hooks_out_of_the_workspace(user: ClaudeHome) -> None:
    """The runner reads no hooks file the agent could write (a file in the workspace is
    refused, D191): project scope's moved hooks live under the user's ~/.claude. Before
    D240 they were moved into the workspace, and none of the user's hooks ran, the guard
    neither."""
    settings = user.write_settings("project")
    done = user.install("project")
    assert done.returncode == 0, done.stderr
    projects = user.home / ".claude" / "hookrunner-projects"
    (moved,) = projects.glob("workspace-*.json")
    assert json.loads(moved.read_text())["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    assert list(user.workspace.rglob("hookrunner*")) == []
    assert_guarded(user.run(SCRIPT), user.workspace)
    assert user.install("project").returncode == 0  # twice: the same file, unchanged
    assert list(projects.iterdir()) == [moved]
    undone = subprocess.run(
        [HOOKRUNNER, "claude", "uninstall", "--scope", "project", "--workspace", str(user.workspace)],
        capture_output=True, text=True, env=user.env, timeout=60,
    )  # fmt: skip
    assert undone.returncode == 0, undone.stderr
    assert json.loads(settings.read_text()) == user.four_hooks()
    assert not moved.exists()
