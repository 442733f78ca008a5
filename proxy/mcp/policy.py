"""An entry's `mcp:` block (docs/configuration.md#mcp-servers): endpoints, methods, tools
and their argument clauses, as frozen values compiled once at load.

`parse_mcp` reads the block (the JSON Schema only says it is a mapping) and reports every
problem at its location (`network.allowlist[2].mcp.tools[1].arguments.owner.matches`):
unknown keys, an empty list, a path that is not canonical, a pattern RE2 refuses, a
`max_body` that is not a size.

Invariants:
* A clause compares strictly: `equals: 1` is not met by `true` or `"1"`; `matches` is an
  RE2 FULL match over a string value (never a search), compiled here, never per request.
* A parsed policy is never empty where emptiness would mean "nothing": `methods` and
  `tools` have at least one item (an empty list is a configuration error).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2

from sandbox_egress.proxy.paths import canonical_path

Report = Callable[[str, str], None]  # (location, message)

DEFAULT_METHODS = (
    "initialize",
    "notifications/initialized",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
)
DEFAULT_MAX_BODY = 1024 * 1024
MAX_BODY_CEILING = 64 * 1024 * 1024  # a held body is in memory: bounded (D212)
_KEYS = ("endpoint", "methods", "tools", "filter_tools_list", "max_body", "websocket")
_TOOL_KEYS = ("name", "arguments")
_SIZE = re.compile(r"^([0-9]{1,12})\s*(B|KiB|MiB|GiB)?$")
_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, None: 1}

Scalar = str | int | float | bool | None

_QUIET = re2.Options()
_QUIET.log_errors = False  # a refused pattern is a located problem, not a line on stderr


@dataclass(frozen=True, slots=True)
class Clause:
    """One argument's condition; exactly one of the three kinds is set."""

    path: tuple[str, ...]  # the dotted path into params.arguments
    equals: tuple[Scalar, ...] | None = None  # `equals` (one item) or `in` (any item)
    matches: Any = None  # a compiled RE2 pattern, full match

    def holds(self, value: Any) -> bool:
        if self.matches is not None:
            if not isinstance(value, str):
                return False
            try:
                return self.matches.fullmatch(value) is not None
            except UnicodeError:  # a lone surrogate from a \ud800 escape: never matches
                return False
        return any(same(value, wanted) for wanted in self.equals or ())


def same(value: Any, wanted: Scalar) -> bool:
    """JSON equality without Python's coercions: `true` is not `1`, `1` is `1.0`."""
    if isinstance(wanted, bool) or isinstance(value, bool):
        return type(value) is type(wanted) and value == wanted
    if isinstance(wanted, int | float) and isinstance(value, int | float):
        return value == wanted
    return type(value) is type(wanted) and value == wanted


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    clauses: tuple[Clause, ...] = ()


@dataclass(frozen=True, slots=True)
class McpPolicy:
    endpoints: frozenset[str]  # canonical paths
    methods: frozenset[str] = frozenset(DEFAULT_METHODS)
    tools: dict[str, Tool] | None = None  # None: every tool
    filter_tools_list: bool = False
    max_body: int = DEFAULT_MAX_BODY
    websocket: bool = False  # a WebSocket upgrade is refused unless true (D332)

    def __hash__(self) -> int:  # `tools` is a dict; a policy is compared by identity
        return id(self)

    def tool_allowed(self, name: Any) -> bool:
        return self.tools is None or (isinstance(name, str) and name in self.tools)


def parse_mcp(raw: Any, where: str, report: Report) -> tuple[bool, McpPolicy | None]:
    """(valid, policy) of an entry's `mcp` block; the policy is None when absent or refused."""
    if raw is None:
        return True, None
    if not isinstance(raw, dict):
        report(where, f"must be a mapping of {', '.join(_KEYS)}")
        return False, None
    problems: list[tuple[str, str]] = []
    for key in raw:
        if key not in _KEYS:
            problems.append((where, f"unknown key {str(key)!r} (expected: {', '.join(_KEYS)})"))
    endpoints = _endpoints(raw.get("endpoint"), f"{where}.endpoint", problems)
    methods = _names(raw.get("methods", list(DEFAULT_METHODS)), f"{where}.methods", problems)
    tools = _tools(raw["tools"], f"{where}.tools", problems) if "tools" in raw else None
    filtering = raw.get("filter_tools_list", False)
    if not isinstance(filtering, bool):
        problems.append((f"{where}.filter_tools_list", "must be true or false"))
    websocket = raw.get("websocket", False)
    if not isinstance(websocket, bool):
        problems.append((f"{where}.websocket", "must be true or false"))
    size = parse_size(raw.get("max_body", DEFAULT_MAX_BODY))
    if isinstance(size, str):
        problems.append((f"{where}.max_body", size))
    for location, message in problems:
        report(location, message)
    if problems or isinstance(size, str):
        return False, None
    return True, McpPolicy(
        endpoints, frozenset(methods), tools, filtering is True, size, websocket is True
    )


def parse_size(raw: Any) -> int | str:
    """`1MiB`, `65536`, `512KiB`: bytes, or why it is not a size."""
    expected = f"must be a size from 1 B to 64MiB such as 1MiB (got {raw!r})"
    if isinstance(raw, int) and not isinstance(raw, bool):
        size = raw
    else:
        match = _SIZE.match(raw) if isinstance(raw, str) else None
        if match is None:
            return expected
        size = int(match[1]) * _UNITS[match[2]]
    return size if 0 < size <= MAX_BODY_CEILING else expected


def _endpoints(raw: Any, where: str, problems: list[tuple[str, str]]) -> frozenset[str]:
    if not isinstance(raw, list) or not raw:
        problems.append((where, "must be a non-empty list of paths such as /mcp"))
        return frozenset()
    found = set()
    for index, path in enumerate(raw):
        canonical = canonical_path(path) if isinstance(path, str) else None
        if not isinstance(path, str) or not path.startswith("/") or "?" in path or "*" in path:
            problems.append((f"{where}[{index}]", "an endpoint is an exact path beginning '/'"))
        elif canonical is None or canonical != path:
            problems.append((f"{where}[{index}]", "an endpoint must be written canonically"))
        else:
            found.add(canonical)
    return frozenset(found)


def _names(raw: Any, where: str, problems: list[tuple[str, str]]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(m, str) and m for m in raw):
        problems.append((where, "must be a non-empty list of method names"))
        return ()
    return tuple(raw)


def _tools(raw: Any, where: str, problems: list[tuple[str, str]]) -> dict[str, Tool] | None:
    if not isinstance(raw, list) or not raw:
        problems.append((where, "must be a non-empty list of tools (absent: every tool)"))
        return None
    tools: dict[str, Tool] = {}
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            problems.append((here, "a tool is a mapping with a non-empty name"))
            continue
        unknown = [str(k) for k in item if k not in _TOOL_KEYS]
        if unknown:
            problems.append((here, f"unknown key {unknown[0]!r} (expected: name, arguments)"))
        if item["name"] in tools:
            problems.append((f"{here}.name", f"duplicate tool {item['name']!r}"))
        clauses = _clauses(item.get("arguments"), f"{here}.arguments", problems)
        tools[item["name"]] = Tool(item["name"], clauses)
    return tools


def _clauses(raw: Any, where: str, problems: list[tuple[str, str]]) -> tuple[Clause, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        problems.append((where, "must be a non-empty mapping of argument path to clause"))
        return ()
    clauses = []
    for name, spec in raw.items():
        here = f"{where}.{name}"
        path = tuple(str(name).split("."))
        if not isinstance(name, str) or not all(path):
            problems.append((here, "an argument path is names joined by '.'"))
            continue
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
            problems.append((here, "a clause is exactly one of equals, in, matches"))
            continue
        kind, value = next(iter(spec.items()))
        clause = KINDS[kind](path, value, f"{here}.{kind}", problems)
        if clause is not None:
            clauses.append(clause)
    return tuple(clauses)


Problems = list[tuple[str, str]]


def _matches(path: tuple[str, ...], value: Any, where: str, problems: Problems) -> Clause | None:
    if not isinstance(value, str):
        problems.append((where, "must be an RE2 pattern (a string)"))
        return None
    try:
        return Clause(path, matches=re2.compile(value, _QUIET))
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args else "refused"
        problems.append((where, f"not a valid RE2 pattern: {detail}"))
        return None


def _in(path: tuple[str, ...], value: Any, where: str, problems: Problems) -> Clause | None:
    if not isinstance(value, list) or not value:
        problems.append((where, "must be a non-empty list of values"))
        return None
    return _values(path, value, where, problems)


def _equals(path: tuple[str, ...], value: Any, where: str, problems: Problems) -> Clause | None:
    return _values(path, [value], where, problems)


def _values(
    path: tuple[str, ...], items: list[Any], where: str, problems: Problems
) -> Clause | None:
    if not all(v is None or isinstance(v, str | int | float | bool) for v in items):
        problems.append((where, "values are strings, numbers, true, false or null"))
        return None
    return Clause(path, equals=tuple(items))


# An argument clause's kinds: its key in the file, and what reads its value.
KINDS: dict[str, Callable[[tuple[str, ...], Any, str, Problems], Clause | None]] = {
    "equals": _equals,
    "in": _in,
    "matches": _matches,
}
