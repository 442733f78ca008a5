"""Helpers for the hook runner tests: workspaces, sessions, hook documents, warning parsing."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.session import HookSession

PY = shlex.quote(sys.executable)
HOOKRUNNER = str(Path(sys.executable).parent / "hookrunner")

_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse_line(line: str) -> dict[str, str]:
    """One logfmt line written by the reporter, as a dict (plus its level)."""
    prefix, _, rest = line.partition(" ")
    level, _, rest = rest.partition(" ")
    fields = {"level": level}
    for key, value in _FIELD.findall(rest):
        fields[key] = json.loads(value) if value.startswith('"') else value
    return fields


def warnings_in(text: str) -> list[dict[str, str]]:
    lines = [parse_line(x) for x in text.splitlines() if x.startswith("hookrunner: ")]
    return [x for x in lines if x["level"] == "warning"]


def base_environ(**extra: str) -> dict[str, str]:
    """A small, explicit environment: nothing of the host's proxies or secrets leaks in."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home())}
    environ.update(extra)
    return environ


class Env:
    """A workspace with its hooks.json files and a way to open sessions on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        (self.workspace / ".agents").mkdir(parents=True)
        self.system_config = root / "system" / "hooks.json"
        self.system_config.parent.mkdir()
        self.system_config.write_text("{}")
        self.metrics = HookMetrics()
        self.stream = io.StringIO()

    def hooks(self, document: Any, *, system: bool = False) -> Path:
        path = self.system_config if system else self.workspace / ".agents" / "hooks.json"
        path.write_text(document if isinstance(document, str) else json.dumps(document))
        return path

    def script(self, name: str, code: str) -> str:
        """Write a Python hook script; returns the command line that runs it."""
        path = self.root / "scripts" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(code)
        return f"{PY} {shlex.quote(str(path))}"

    def session(self, **kwargs: Any) -> HookSession:
        kwargs.setdefault("system_config", self.system_config)
        kwargs.setdefault("environ", base_environ())
        kwargs.setdefault("environment_id", "env_test")
        return HookSession(self.workspace, metrics=self.metrics, stream=self.stream, **kwargs)

    def warnings(self) -> list[dict[str, str]]:
        return warnings_in(self.stream.getvalue())

    def runs(self, event: str, kind: str, outcome: str) -> float:
        return self.metrics.value("hook_runs_total", event=event, type=kind, outcome=outcome)


def rule(matcher: str, *handlers: dict[str, Any]) -> dict[str, Any]:
    return {"matcher": matcher, "hooks": list(handlers)}


def command(line: str, timeout: int | None = None) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "command", "command": line}
    if timeout is not None:
        handler["timeout"] = timeout
    return handler


def pre_group(*rules: dict[str, Any], enabled: bool | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"pre_tool_execution": list(rules)}
    if enabled is not None:
        group["enabled"] = enabled
    return group
