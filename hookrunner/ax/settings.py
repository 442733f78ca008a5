"""Claude Code's settings files, read as they are: their ``hooks`` as claude-code entries (pure).

The document (Claude Code's settings reference): ``{"hooks": {EVENT: [{"matcher":
PATTERN, "hooks": [{"type": "command", "command": CMD, "timeout": SECONDS}]}]},
"disableAllHooks": BOOL, "allowManagedHooksOnly": BOOL, ...}``. Rules
(docs/hooks.md, "Claude Code settings files"):
* every other top-level key (``permissions``, ``env``, ``model``...) is
  accepted and ignored: it is Claude Code's, not the runner's;
* every problem is reported with file and JSON path
  (``$.hooks.PreToolUse[0].hooks[1].command``); a handler with an invalid field
  is skipped, never repaired, and the rest loads;
* an event this runner does not fire (``Notification``, ``PermissionRequest``...),
  and a handler ``type`` it cannot run (``prompt``, ``agent``: they need a model)
  are reported as warnings (an ordinary settings file has them), never silently skipped;
* an ``http`` handler (``url`` https, ``headers``, ``allowedEnvVars``) is POSTed
  through the egress proxy like a hooks.json http handler; a header holding a
  literal credential (the runner's token table) is reported and the handler
  skipped; ``allowedHttpHookUrls`` of the managed file limits the URLs;
* every command handler is a ``claude-code`` entry (exit 2, ``permissionDecision``...),
  ``timeout`` in seconds (a positive number, rounded up; default 60).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sandbox_egress.hookrunner.ax.eventtable import AxEvent
from sandbox_egress.hookrunner.ax.matcher import compile_ax_matcher
from sandbox_egress.hookrunner.ax.model import AxEntry, HttpTarget, Protocol
from sandbox_egress.hookrunner.ax.schema import entry_notes
from sandbox_egress.hookrunner.model import Problem
from sandbox_egress.hookrunner.schema import check_url, headers_problem, key_path, type_name

DEFAULT_TIMEOUT = 60
MAX_HANDLERS = 100
UNSUPPORTED_TYPES = {
    "prompt": "a prompt hook asks a model, which this runner does not have",
    "agent": "an agent hook runs a subagent, which this runner does not have",
}
_SWITCHES = ("disableAllHooks", "allowManagedHooksOnly")


class Level(StrEnum):
    """Where a settings file is, in Claude Code's order of precedence (highest first)."""

    MANAGED = "managed"
    LOCAL = "local"
    PROJECT = "project"
    USER = "user"


@dataclass(frozen=True)
class SettingsFile:
    """One settings file: its hooks and the two switches, as written (None: not set)."""

    level: Level
    file: str
    entries: tuple[AxEntry, ...]
    disable_all: bool | None = None
    managed_only: bool | None = None
    allowed_urls: tuple[str, ...] | None = None  # allowedHttpHookUrls (managed file only)


class _Reader:
    def __init__(self, file: str, level: Level) -> None:
        self.file = file
        self.level = level
        self.problems: list[Problem] = []
        self.entries: list[AxEntry] = []

    def problem(self, path: str, reason: str, *, warning: bool = False) -> None:
        self.problems.append(Problem(self.file, path, reason, warning=warning))

    def document(self, doc: Any) -> SettingsFile:
        if not isinstance(doc, dict):
            self.problem("$", f"a settings file must be an object, got {type_name(doc)}")
            return SettingsFile(self.level, self.file, ())
        switches: dict[str, bool | None] = {}
        for key in _SWITCHES:
            value = doc.get(key)
            if value is not None and not isinstance(value, bool):
                self.problem(key_path("$", key), f"must be true or false, got {type_name(value)}")
                value = None
            switches[key] = value
        if switches["allowManagedHooksOnly"] is not None and self.level is not Level.MANAGED:
            self.problem(
                "$.allowManagedHooksOnly", "only the managed settings file can set it (ignored)"
            )
        urls = doc.get("allowedHttpHookUrls")
        allowed: tuple[str, ...] | None = None
        if urls is not None and self.level is not Level.MANAGED:
            self.problem("$.allowedHttpHookUrls", "only the managed settings file can set it")
        elif urls is not None:
            if isinstance(urls, list) and all(isinstance(u, str) for u in urls):
                allowed = tuple(urls)
            else:
                self.problem("$.allowedHttpHookUrls", "must be an array of URL patterns")
                allowed = ()  # unreadable: no http hook may run
        hooks = doc.get("hooks", {})
        if not isinstance(hooks, dict):
            self.problem("$.hooks", f"must be an object of events, got {type_name(hooks)}")
        else:
            for name, groups in hooks.items():
                self.event(str(name), groups)
        return SettingsFile(
            self.level,
            self.file,
            tuple(self.entries),
            switches["disableAllHooks"],
            switches["allowManagedHooksOnly"] if self.level is Level.MANAGED else None,
            allowed,
        )

    def event(self, name: str, groups: Any) -> None:
        path = key_path("$.hooks", name)
        try:
            event = AxEvent(name)
        except ValueError:
            fired = ", ".join(e.value for e in AxEvent)
            self.problem(
                path,
                f"this runner does not fire {name!r} (it fires {fired}); its hooks never run "
                "here (Claude Code still runs them itself)",
                warning=True,
            )
            return
        if not isinstance(groups, list):
            self.problem(path, f"must be an array of matcher groups, got {type_name(groups)}")
            return
        for index, group in enumerate(groups):
            self.group(event, group, f"{path}[{index}]")

    def group(self, event: AxEvent, group: Any, path: str) -> None:
        if not isinstance(group, dict):
            self.problem(path, f"a matcher group must be an object, got {type_name(group)}")
            return
        pattern = group.get("matcher", "")
        if not isinstance(pattern, str):
            self.problem(f"{path}.matcher", "must be a string; group skipped")
            return
        matcher = compile_ax_matcher(pattern)
        for key, message in entry_notes(event, Protocol.CLAUDE_CODE, matcher, False):
            self.problem(f"{path}.{key}", message)
        handlers = group.get("hooks")
        if not isinstance(handlers, list):
            self.problem(f"{path}.hooks", f"must be an array of hooks, got {type_name(handlers)}")
            return
        for index, handler in enumerate(handlers[:MAX_HANDLERS]):
            where = f"{path}.hooks[{index}]"
            command, timeout, http = self.handler(handler, where)
            if command is None:
                continue
            self.entries.append(
                AxEntry(
                    http=http,
                    event=event,
                    matcher=matcher,
                    command=command,
                    block_on_failure=False,
                    protocol=Protocol.CLAUDE_CODE,
                    timeout=timeout,
                    pack="",
                    source=f"{self.level.value} settings {where[2:]}",
                    where=f"{self.file} {where}",
                )
            )

    def handler(self, handler: Any, path: str) -> tuple[str | None, int, HttpTarget | None]:
        if not isinstance(handler, dict):
            self.problem(path, f"a hook must be an object, got {type_name(handler)}; skipped")
            return None, 0, None
        kind = handler.get("type")
        if kind in UNSUPPORTED_TYPES:
            self.problem(
                f"{path}.type",
                f"{UNSUPPORTED_TYPES[kind]}; this hook never runs here",
                warning=True,
            )
            return None, 0, None
        if kind not in ("command", "http"):
            got = type_name(kind) if not isinstance(kind, str) else repr(kind)
            self.problem(f"{path}.type", f'must be "command" or "http", got {got}; skipped')
            return None, 0, None
        timeout = handler.get("timeout", DEFAULT_TIMEOUT)
        number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
        if not number or not math.isfinite(timeout) or timeout <= 0:
            self.problem(f"{path}.timeout", "must be a positive number of seconds; skipped")
            return None, 0, None
        seconds = max(1, math.ceil(timeout))
        if kind == "http":
            http = self.http(handler, path)
            return ("", seconds, http) if http is not None else (None, 0, None)
        command = handler.get("command")
        if not isinstance(command, str) or not command.strip():
            self.problem(f"{path}.command", "must be a non-empty string; skipped")
            return None, 0, None
        return command, seconds, None

    def http(self, handler: dict[str, Any], path: str) -> HttpTarget | None:
        url = handler.get("url")
        problem = check_url(url)
        if problem is not None:
            self.problem(f"{path}.url", f"{problem}; skipped")
            return None
        headers = handler.get("headers", {})
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            self.problem(f"{path}.headers", "must be an object of strings; skipped")
            return None
        found = headers_problem(headers)
        if found is not None:
            at = key_path(f"{path}.headers", found[0][0]) if found[0] else f"{path}.headers"
            self.problem(at, f"{found[1]}; skipped")
            return None
        allowed = handler.get("allowedEnvVars", [])
        if not isinstance(allowed, list) or not all(isinstance(v, str) for v in allowed):
            self.problem(f"{path}.allowedEnvVars", "must be an array of names; skipped")
            return None
        return HttpTarget(str(url), tuple(headers.items()), tuple(allowed))


def read_settings(doc: Any, file: str, level: Level) -> tuple[SettingsFile, list[Problem]]:
    reader = _Reader(file, level)
    settings = reader.document(doc)
    return settings, reader.problems


def url_allowed(url: str, patterns: tuple[str, ...]) -> bool:
    """``allowedHttpHookUrls``: a pattern matches the whole URL, ``*`` any run of characters."""
    return any(re.fullmatch(".*".join(map(re.escape, p.split("*"))), url) for p in patterns)
