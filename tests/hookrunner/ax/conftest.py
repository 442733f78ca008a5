"""Fixtures for the AX Code dialect tests: a workspace with .ax-code/hooks.json and sessions on it."""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.session import AxSession
from sandbox_egress.hookrunner.metrics import HookMetrics
from tests.hookrunner.helpers import PY, base_environ, warnings_in


class AxEnv:
    """A workspace, its AX hooks file, a private state directory, and sessions that get closed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        (self.workspace / ".ax-code").mkdir(parents=True)
        self.state = root / "state"
        self.metrics = HookMetrics()
        self.stream = io.StringIO()
        self.sessions: list[AxSession] = []

    @property
    def hooks_file(self) -> Path:
        return self.workspace / ".ax-code" / "hooks.json"

    def hooks(self, document: Any) -> Path:
        text = document if isinstance(document, str) else json.dumps(document)
        self.hooks_file.write_text(text)
        return self.hooks_file

    def script(self, name: str, code: str) -> str:
        """A Python hook script (standard library only); returns the command line that runs it."""
        path = self.root / "scripts" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(code)
        return f"{PY} -I -S {shlex.quote(str(path))}"

    def environ(self, **extra: str) -> dict[str, str]:
        return base_environ(XDG_STATE_HOME=str(self.state), **extra)

    def session(self, **kwargs: Any) -> AxSession:
        kwargs.setdefault("environ", self.environ())
        kwargs.setdefault("trust_project", True)
        kwargs.setdefault("session_id", "ses_test")
        session = AxSession(self.workspace, metrics=self.metrics, stream=self.stream, **kwargs)
        self.sessions.append(session)
        return session

    def warnings(self) -> list[dict[str, str]]:
        return warnings_in(self.stream.getvalue())

    def runs(self, event: str, outcome: str) -> float:
        return self.metrics.value("hook_runs_total", event=event, type="command", outcome=outcome)


@pytest.fixture
def ax(tmp_path: Path) -> Iterator[AxEnv]:
    env = AxEnv(tmp_path)
    try:
        yield env
    finally:
        for session in env.sessions:
            session.close(timeout=0)


def entry(event: str, command: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, "command": command, **fields}


def cc(event: str, command: str, **fields: Any) -> dict[str, Any]:
    return entry(event, command, protocol="claude-code", **fields)
