"""Shared by the Claude Code compatibility tests: full Claude Code payloads and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.helpers import HOOKRUNNER

REALWORLD = Path(__file__).resolve().parent / "realworld"
SESSION = "4b1c7f6e-2d0a-4c39-9a53-0f7c1e2b8d41"
# Hook scripts find python3, jq, git and the project's ruff on PATH.
PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"


def claude_payload(ax: AxEnv, event: str, **fields: Any) -> dict[str, Any]:
    """What Claude Code sends for ``event``: its common fields, then the event's own."""
    return {
        "session_id": SESSION,
        "transcript_path": f"/root/.claude/projects/-workspace/{SESSION}.jsonl",
        "cwd": str(ax.workspace.resolve()),
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def hook(event: str, script: str, matcher: str = "") -> dict[str, Any]:
    return {
        "event": event,
        "matcher": matcher,
        "command": str(REALWORLD / script),
        "protocol": "claude-code",
    }


def fire(ax: AxEnv, event: str, payload: Any, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOOKRUNNER, "fire", event, "--workspace", str(ax.workspace), "--trust-project-hooks",
         *flags],
        input=payload if isinstance(payload, str) else json.dumps(payload),
        capture_output=True,
        text=True,
        env=ax.environ(PATH=PATH),
        timeout=60,
    )  # fmt: skip


def answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    document: dict[str, Any] = json.loads(lines[0])
    return document


def warning_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("hookrunner: warning")]
