"""The real Claude Code CLI against a scripted fake model, with a user's hooks (issue 35).

What tests/hookrunner/ax/test_claude_cli.py and bench/claude_cli.py share. The npm
package `@anthropic-ai/claude-code` (its native binary, shipped inside the registry's
platform package) is installed into `.cache/claude-code` of the repository, once, with
npm. Only the model is mocked (`testbed.fake_model`). `ClaudeHome.run` starts the fake
model and `claude -p` inside a network namespace the caller made, which has nothing but
its loopback: the CLI cannot reach anything else. Telemetry, error reports and updates
are switched off too. The warm runners the installed hook command starts are ended (by
their pid, read from their socket) when a run ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import procs

PY = shlex.quote(sys.executable)
HOOKRUNNER = str(Path(sys.executable).parent / "hookrunner")

VERSION = "2.1.332"  # the Claude Code release this test was written against
REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "claude-code"
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
    with open(CACHE / ".lock", "w") as lock:  # two test workers: one npm at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (path := found()) is not None:
            return path
        done = subprocess.run(
            ["npm", "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--no-save",
             f"@anthropic-ai/claude-code@{VERSION}"],
            capture_output=True, text=True, timeout=NPM_TIMEOUT,
        )  # fmt: skip
    if done.returncode != 0 or (path := found()) is None:
        raise RuntimeError(
            f"npm installed no runnable Claude Code {VERSION} under {CACHE} "
            f"(exit {done.returncode}): {done.stderr[-2000:]}"
        )
    return path


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

    def run(
        self,
        script: list[dict[str, Any]],
        args: Sequence[str] = ("--allowedTools", "Bash"),
        env: Mapping[str, str] | None = None,
    ) -> Run:
        """The fake model, then `claude -p` against it, both inside the namespace; `args`
        end the command line, `env` is added to the CLI's environment."""
        (self.root / "script.json").write_text(json.dumps(script))
        files = {name: self.root / name for name in ("model.log", "ready", "port")}
        for path in files.values():  # a second run in this home waits for its own model
            path.unlink(missing_ok=True)
        model = procs.start(
            "fake-model",
            ["ip", "netns", "exec", self.netns, sys.executable, "-m", "testbed.fake_model",
             "--log", str(files["model.log"]), "--ready", str(files["ready"]),
             "--port-file", str(files["port"]), "--script", str(self.root / "script.json")],
            self.root,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        try:
            procs.wait_until("the fake model", files["ready"].exists, 30, model)
            port = int(files["port"].read_text())
            given = {**self.env, **(env or {}), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
                     "ANTHROPIC_API_KEY": "sk-ant-dummy-not-a-key"}  # fmt: skip
            done = subprocess.run(
                ["ip", "netns", "exec", self.netns, "env", "-i", *[f"{k}={v}" for k, v in given.items()],
                 str(self.claude), "-p", "Say hi, then clean up.", "--output-format", "stream-json",
                 "--verbose", *args],
                cwd=self.workspace, capture_output=True, text=True, timeout=RUN_TIMEOUT,
            )  # fmt: skip
        finally:
            model.stop()
            stop_warm_runners(self.run_dir)
        transcripts = list((self.home / ".claude" / "projects").glob("*/*.jsonl"))
        return Run(
            code=done.returncode,
            stream=[json.loads(line) for line in done.stdout.splitlines() if line.strip()],
            stderr=done.stderr,
            requests=[json.loads(x) for x in files["model.log"].read_text().splitlines()],
            transcript=[json.loads(x) for p in transcripts for x in p.read_text().splitlines()],
            hooks_ran=self.log.read_text().splitlines() if self.log.exists() else [],
        )


def server_pid(path: Path, tries: int = 300) -> int | None:
    """The pid of the process listening at `path` (its socket's peer credentials), waiting
    up to `tries` tenths of a second for it."""
    for _ in range(tries):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            credentials = probe.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
            )
            return int(struct.unpack("3i", credentials)[0])
        except OSError:
            time.sleep(0.1)
        finally:
            probe.close()
    return None


def stop_warm_runners(run_dir: Path, tries: int = 50) -> None:
    """End the warm runners (`hookrunner claude serve`) started under `run_dir`, by the pid
    of each socket's listener."""
    for path in run_dir.glob("hookrunner-*/fire-*.sock"):
        pid = server_pid(path, tries)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
