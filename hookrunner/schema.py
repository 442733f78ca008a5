"""Validation of one parsed hooks.json document into frozen groups.

Every problem is collected with its file, JSON path and reason; nothing stops
at the first one. The rules (SPEC 2.2, decisions in docs/hooks.md):
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
from typing import Any
from urllib.parse import urlsplit

from common.problems import type_name
from hookrunner.handlerhost import HostError, handler_host
from hookrunner.matcher import compile_matcher
from hookrunner.model import (
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
_GROUP_KEYS = frozenset({"enabled", Event.PRE.value, Event.POST.value})
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


class _Validator:
    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(Problem(self.file, path, reason))

    def object(self, value: Any, path: str, what: str, allowed: frozenset[str]) -> bool:
        """Check that ``value`` is an unambiguous object; report unknown keys."""
        if not isinstance(value, dict):
            self.problem(path, f"{what} must be an object, got {type_name(value)}; skipped")
            return False
        for key in getattr(value, "duplicates", ()):
            self.problem(key_path(path, key), f"duplicate key in {what}; {what} skipped")
        for key in value:
            if key not in allowed:
                self.problem(key_path(path, key), f"unknown key in {what} (ignored)")
        return not getattr(value, "duplicates", ())

    def document(self, doc: Any) -> list[Group]:
        if not isinstance(doc, dict):
            self.problem("$", f"the document must be an object, got {type_name(doc)}")
            return []
        pairs = doc.pairs if isinstance(doc, JsonObject) else list(doc.items())
        for key in getattr(doc, "duplicates", ()):
            self.problem(key_path("$", key), "group name used twice; both groups run")
        groups = [self.group(name, value, key_path("$", name)) for name, value in pairs]
        return [g for g in groups if g is not None]

    def group(self, name: str, value: Any, path: str) -> Group | None:
        if not self.object(value, path, "group", _GROUP_KEYS):
            return None
        ok = True
        enabled = value.get("enabled", True)
        if not isinstance(enabled, bool):
            self.problem(
                key_path(path, "enabled"),
                f"must be true or false, got {type_name(enabled)}; group skipped",
            )
            ok = False
        rules: dict[Event, tuple[Rule, ...]] = {}
        for event in Event:
            found = self.rules(value.get(event.value, []), key_path(path, event.value))
            ok = ok and found is not None
            rules[event] = found or ()
        if not ok:
            return None
        return Group(name, enabled, rules[Event.PRE], rules[Event.POST], self.file)

    def rules(self, value: Any, path: str) -> tuple[Rule, ...] | None:
        if not isinstance(value, list):
            self.problem(path, f"must be an array of rules, got {type_name(value)}; group skipped")
            return None
        found = (self.rule(item, f"{path}[{i}]") for i, item in enumerate(value))
        return tuple(r for r in found if r is not None)

    def rule(self, value: Any, path: str) -> Rule | None:
        if not self.object(value, path, "rule", _RULE_KEYS):
            return None
        pattern = value.get("matcher", "")
        if not isinstance(pattern, str):
            self.problem(
                key_path(path, "matcher"),
                f"must be a string, got {type_name(pattern)}; rule skipped",
            )
            return None
        matcher = compile_matcher(pattern)
        if matcher.error is not None:
            self.problem(
                key_path(path, "matcher"),
                f"{json.dumps(pattern)} is {matcher.error}; matches nothing",
            )
        if "hooks" not in value:
            self.problem(path, 'missing required key "hooks"; rule skipped')
            return None
        hooks = value["hooks"]
        if not isinstance(hooks, list):
            self.problem(
                key_path(path, "hooks"),
                f"must be an array of handlers, got {type_name(hooks)}; rule skipped",
            )
            return None
        handlers = (self.handler(h, f"{key_path(path, 'hooks')}[{i}]") for i, h in enumerate(hooks))
        return Rule(matcher, tuple(h for h in handlers if h is not None))

    def handler(self, value: Any, path: str) -> Handler | None:
        if not isinstance(value, dict):
            self.skip(path, f"a handler must be an object, got {type_name(value)}")
            return None
        kind = value.get("type")
        if not isinstance(kind, str) or kind not in _HANDLER_KEYS:
            got = "missing" if kind is None else json.dumps(kind)[:40]
            self.skip(key_path(path, "type"), f'must be "command" or "http", got {got}')
            return None
        if not self.object(value, path, "handler", _HANDLER_KEYS[kind]):
            return None
        timeout = value.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
            shown = json.dumps(timeout)[:40] if not isinstance(timeout, dict | list) else "?"
            self.skip(
                key_path(path, "timeout"), f"must be a positive integer of seconds, got {shown}"
            )
            return None
        where = f"{self.file} {path}"
        if kind == "command":
            command = value.get("command")
            if not isinstance(command, str) or not command.strip():
                self.skip(key_path(path, "command"), "must be a non-empty string")
                return None
            if "\x00" in command:
                self.skip(key_path(path, "command"), "must not contain a NUL character")
                return None
            return CommandHandler(command, timeout, where)
        url = value.get("url")
        url_problem = check_url(url)
        if url_problem is not None or not isinstance(url, str):
            self.skip(key_path(path, "url"), url_problem or "must be a string")
            return None
        headers = self.headers(value.get("headers", {}), key_path(path, "headers"))
        if headers is None:
            return None
        return HttpHandler(url, headers, timeout, where)

    def headers(self, value: Any, path: str) -> tuple[tuple[str, str], ...] | None:
        if not isinstance(value, dict):
            self.skip(path, f"must be an object of header names to strings, got {type_name(value)}")
            return None
        if getattr(value, "duplicates", ()):
            self.skip(path, "a header is given twice")
            return None
        seen: set[str] = set()
        for name, header_value in value.items():
            where = key_path(path, name)
            if not _TOKEN.fullmatch(name):
                self.skip(where, "is not a valid header name")
                return None
            if name.lower() in RESERVED_HEADERS:
                self.skip(where, "is set by the runner and cannot be configured")
                return None
            if name.lower() in seen:
                self.skip(where, "the same header is given twice (names ignore case)")
                return None
            seen.add(name.lower())
            if not isinstance(header_value, str):
                self.skip(where, f"must be a string, got {type_name(header_value)}")
                return None
            if _CONTROL.search(header_value):
                self.skip(where, "must not contain control characters (CR, LF, NUL...)")
                return None
        return tuple(value.items())

    def skip(self, path: str, reason: str) -> None:
        self.problem(path, f"{reason}; handler skipped")


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
    validator = _Validator(file)
    groups = validator.document(doc)
    return groups, validator.problems
