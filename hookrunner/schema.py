"""Validation of one parsed hooks.json document into frozen groups.

The structure is the JSON Schema ``common/schemas/hooks.schema.json``
(checked by ``common.problems``, whose ``x-problem`` words each message); the
walk below skips every object the schema found wrong and adds what no schema
says: repeated keys, RE2 matchers (``compile_matcher``), URLs (``check_url``)
and reserved or repeated headers (``headers_problem``).
Every problem is collected with its file, JSON path and reason; nothing stops
at the first one. The rules (docs/hooks.md#file-format, decisions in docs/hooks.md):
* a group, rule or handler with a missing or invalid field is skipped whole,
  never repaired (a ``timeout`` of ``0``, ``"10"`` or ``1.5`` skips the handler);
* an unknown key is reported and ignored, so a stray ``"comment"`` does not
  switch a guard off;
* a key repeated inside a group, rule or handler makes that object ambiguous
  and it is skipped; a group name repeated at the top level is reported and
  both groups run, in file order;
* a matcher that is not valid RE2 is reported and its rule matches nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from sandbox_egress.common.problems import Found, schema_errors, schema_validator, type_name
from sandbox_egress.common.tokens import token_format
from sandbox_egress.hookrunner.handlerhost import HostError, handler_host
from sandbox_egress.hookrunner.matcher import compile_matcher
from sandbox_egress.hookrunner.model import (
    CommandHandler,
    Event,
    Group,
    Handler,
    HttpHandler,
    Problem,
    Rule,
)

DEFAULT_TIMEOUT = 30
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers the runner writes itself, or that would change how the request is framed.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
_GROUP_KEYS = frozenset({"enabled", "fail_closed", Event.PRE.value, Event.POST.value})
_RULE_KEYS = frozenset({"matcher", "hooks"})
_HANDLER_KEYS = {
    "command": frozenset({"type", "command", "timeout"}),
    "http": frozenset({"type", "url", "headers", "timeout"}),
}


class JsonObject(dict[str, Any]):
    """A JSON object that remembers every (key, value) pair and the repeated keys."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs
        seen: set[str] = set()
        duplicates: list[str] = []
        for key, _ in pairs:
            if key in seen:
                duplicates.append(key)
            seen.add(key)
        self.duplicates = tuple(duplicates)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads_strict(text: str) -> Any:
    """json.loads that keeps duplicate keys visible and refuses NaN/Infinity."""
    return json.loads(text, object_pairs_hook=JsonObject, parse_constant=_no_constants)


__all__ = ["type_name"]  # common.problems's, read by the AX dialect from here too


def key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"


def json_path(root: str, path: Sequence[str | int]) -> str:
    """``$.g.pre_tool_execution[0].hooks[1]`` for the path of a schema error below ``root``."""
    for part in path:
        root = f"{root}[{part}]" if isinstance(part, int) else key_path(root, part)
    return root


Path = tuple[str | int, ...]
CLAUDE_SETTINGS_HERE = (
    "this is Claude Code's settings format; `hookrunner fire` reads it as "
    "<workspace>/.claude/settings.json, .claude/settings.local.json, ~/.claude/settings.json "
    "or the managed file (--managed-settings), not here"
)


def is_claude_settings(doc: Any) -> bool:
    """A Claude Code settings document: ``{"hooks": {"PreToolUse": [...], ...}}``."""
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    return (
        isinstance(hooks, dict)
        and bool(hooks)
        and all(isinstance(k, str) and k[:1].isupper() for k in hooks)
        and all(isinstance(v, list) for v in hooks.values())
    )


class _Validator:
    """Walks the document the schema checked: an object with a schema error is skipped."""

    def __init__(self, file: str, found: list[Found]) -> None:
        self.file = file
        self.found = found
        self.problems: list[Problem] = []

    def problem(self, path: Path, reason: str) -> None:
        self.problems.append(Problem(self.file, json_path("$", path), reason))

    def valid(self, value: Any, path: Path, what: str, depth: int | None = 1) -> bool:
        """Report the errors of the object at ``path`` (not of the objects inside it)."""
        for key in getattr(value, "duplicates", ()):
            self.problem((*path, key), f"duplicate key in {what}; {what} skipped")
        limit = len(path) + depth if depth is not None else None
        own = [
            f
            for f in self.found
            if f.path[: len(path)] == path and (limit is None or len(f.path) <= limit)
        ]
        for item in own:
            self.problem(item.path, item.message)
        skipped = [f for f in own if f.keyword != "additionalProperties"]
        return not skipped and not getattr(value, "duplicates", ())

    def document(self, doc: Any) -> list[Group]:
        if not isinstance(doc, dict):
            self.valid(doc, (), "document")
            return []
        if is_claude_settings(doc):
            self.problems = [Problem(self.file, "$.hooks", CLAUDE_SETTINGS_HERE)]
            return []
        pairs = doc.pairs if isinstance(doc, JsonObject) else list(doc.items())
        for key in getattr(doc, "duplicates", ()):
            self.problem((key,), "group name used twice; both groups run")
        groups = [self.group(name, value, (name,)) for name, value in pairs]
        return [g for g in groups if g is not None]

    def group(self, name: str, value: Any, path: Path) -> Group | None:
        ok = self.valid(value, path, "group")
        if not isinstance(value, dict) or getattr(value, "duplicates", None):
            return None
        rules: dict[Event, tuple[Rule, ...]] = {}
        for event in Event:
            found = value.get(event.value, [])
            if isinstance(found, list):
                walked = (self.rule(r, (*path, event.value, i)) for i, r in enumerate(found))
                rules[event] = tuple(r for r in walked if r is not None)
        if not ok:
            return None
        enabled = value.get("enabled", True)
        fail_closed = value.get("fail_closed", False)
        return Group(name, enabled, rules[Event.PRE], rules[Event.POST], self.file, fail_closed)

    def rule(self, value: Any, path: Path) -> Rule | None:
        if not self.valid(value, path, "rule"):
            return None
        pattern = value.get("matcher", "")
        matcher = compile_matcher(pattern)
        if matcher.error is not None:
            self.problem(
                (*path, "matcher"), f"{json.dumps(pattern)} is {matcher.error}; matches nothing"
            )
        hooks = value["hooks"]
        handlers = (self.handler(h, (*path, "hooks", i)) for i, h in enumerate(hooks))
        return Rule(matcher, tuple(h for h in handlers if h is not None))

    def handler(self, value: Any, path: Path) -> Handler | None:
        if not self.valid(value, path, "handler", depth=None):
            return None
        timeout = value.get("timeout", DEFAULT_TIMEOUT)
        where = f"{self.file} {json_path('$', path)}"
        if value["type"] == "command":
            return CommandHandler(value["command"], timeout, where)
        url_problem = check_url(value["url"])
        if url_problem is not None:
            self.problem((*path, "url"), f"{url_problem}; handler skipped")
            return None
        headers = value.get("headers", {})
        problem = headers_problem(headers)
        if problem is not None:
            self.problem((*path, "headers", *problem[0]), f"{problem[1]}; handler skipped")
            return None
        return HttpHandler(value["url"], tuple(headers.items()), timeout, where)


def headers_problem(headers: dict[str, str]) -> tuple[tuple[str, ...], str] | None:
    """The first header the runner refuses as ((name,), reason), or ((), reason) for all."""
    if getattr(headers, "duplicates", ()):
        return (), "a header is given twice"
    seen: set[str] = set()
    for name, value in headers.items():
        if name.lower() in RESERVED_HEADERS:
            return (name,), "is set by the runner and cannot be configured"
        if name.lower() in seen:
            return (name,), "the same header is given twice (names ignore case)"
        seen.add(name.lower())
        if _CONTROL.search(value):
            return (name,), "must not contain control characters (CR, LF, NUL...)"
        found = token_format(value)
        if found is not None:
            return (name,), (
                f"holds a literal credential ({found}); a hooks file is no place for a secret: "
                "let the egress proxy inject it"
            )
    return None


def check_url(url: Any) -> str | None:
    """Why ``url`` cannot be an http handler's URL, or None when it can."""
    if not isinstance(url, str) or not url:
        return "must be a non-empty string"
    if any(c.isspace() for c in url) or _CONTROL.search(url):
        return "must not contain whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is not a valid URL"
    if parts.scheme != "https":
        return "must be an https:// URL"
    if not parts.hostname:
        return "has no host"
    try:
        handler_host(parts)
    except HostError:
        return "has an invalid host name"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (use the egress proxy's transform)"
    if port == 0:
        return "has an invalid port"
    return None


def validate_document(doc: Any, file: str) -> tuple[list[Group], list[Problem]]:
    """Turn a parsed document into its valid groups and the problems found."""
    validator = _Validator(file, schema_errors(schema_validator("hooks"), doc))
    groups = validator.document(doc)
    return groups, validator.problems
