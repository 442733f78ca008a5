"""Matchers of the AX Code dialect: AX Code's tool ids, and Claude Code's regular expressions.

Invariants (docs/hooks.md, "Tool names and matchers"):
* ``""`` and ``"*"`` match every event, with or without a tool; an event
  without a tool (``Stop``, ``SessionStart``...) is matched only by them;
* a pattern made only of tool ids (letters, digits, ``_``, ``-``), each
  optionally ending in ``*``, separated by ``|`` (spaces around them
  ignored) is AX Code's ``matcherHits``: each alternative is an exact,
  case-sensitive tool id, or a prefix when it ends in ``*``. Claude Code
  reads ``"Bash"`` and ``"Edit|Write"`` the same way;
* any other pattern (``"mcp__.*"``, ``"Notebook.*"``, ``"^Bash$"``) is a
  regular expression, as Claude Code users write it: RE2, matched against the
  whole tool name (as in the hooks.json dialect). One that RE2 rejects
  matches nothing and carries ``problem``; so does one that can match no
  tool name at all (``"Bash(npm test)"``, a permission rule written where a
  matcher goes), for validation to report;
* ``mcp__<server>`` alone (no ``__<tool>``) names every tool of that MCP server,
  as Claude Code users write it: no tool is called ``mcp__memory``;
* a tool call is matched by either of its names (``vocabulary.names_of``):
  ``"Bash"`` matches ``bash`` and ``"bash"`` matches ``Bash``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.hookrunner.ax.vocabulary import names_of
from sandbox_egress.hookrunner.matcher import compile_matcher

_PLAIN = re.compile(r"[A-Za-z0-9_-]+\*?")
# Characters a tool name is made of (MCP names included: mcp__server-name__tool_name).
_TOOL_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:"


@dataclass(frozen=True)
class AxMatcher:
    pattern: str
    alternatives: tuple[str, ...]  # AX Code ids and prefixes; () for a regular expression
    regex: Any = field(default=None, compare=False, repr=False)  # a hookrunner.matcher.Matcher
    problem: str | None = None  # why it matches nothing, for validation

    @property
    def matches_all(self) -> bool:
        return self.pattern in ("", "*")

    def matches(self, tool: str) -> bool:
        if self.matches_all:
            return True
        if not tool:
            return False
        return any(self._hits(name) for name in names_of(tool))

    def _hits(self, name: str) -> bool:
        if self.regex is not None:
            return bool(self.regex.matches(name))
        for alternative in self.alternatives:
            if alternative.endswith("*"):
                if name.startswith(alternative[:-1]):
                    return True
            elif name == alternative or _server_of(alternative, name):
                return True
        return False


def _server_of(alternative: str, name: str) -> bool:
    """``mcp__memory`` names an MCP server: it matches each of its tools, ``mcp__memory__*``."""
    return (
        alternative.startswith("mcp__")
        and "__" not in alternative[5:]
        and name.startswith(alternative + "__")
    )


def compile_ax_matcher(pattern: str) -> AxMatcher:
    parts = tuple(p.strip() for p in pattern.split("|"))
    if pattern in ("", "*") or all(_PLAIN.fullmatch(p) for p in parts if p):
        return AxMatcher(pattern, tuple(p for p in parts if p))
    regex = compile_matcher(pattern)
    if regex.error is not None:
        return AxMatcher(pattern, (), regex, f"{regex.error}; it matches no tool")
    if not _can_name_a_tool(pattern, regex):
        return AxMatcher(
            pattern,
            (),
            regex,
            f"regular expression {pattern!r} can match no tool name (tool names are letters, "
            "digits, _ - . :); the entry never runs",
        )
    return AxMatcher(pattern, (), regex)


def _can_name_a_tool(pattern: str, regex: Any) -> bool:
    """Whether some string of tool-name characters matches; True when it cannot be told."""
    try:
        parsed = importlib.import_module("re._parser").parse(pattern)
        sample = _shortest(list(parsed))
    except Exception:  # a construct Python's parser reads differently from RE2: do not guess
        return True
    return sample is not None and (sample == "" or bool(regex.matches(sample)))


class _Unknown(Exception):
    pass


def _shortest(items: list[Any]) -> str | None:
    """A shortest string of tool-name characters the parsed items match, or None."""
    out = []
    for op, value in items:
        piece = _node(str(op), value)
        if piece is None:
            return None
        out.append(piece)
    return "".join(out)


def _node(op: str, value: Any) -> str | None:
    if op == "LITERAL":
        return chr(value) if chr(value) in _TOOL_CHARS else None
    if op == "NOT_LITERAL":
        return next((c for c in _TOOL_CHARS if ord(c) != value), None)
    if op == "ANY":
        return "a"
    if op == "IN":
        return next((c for c in _TOOL_CHARS if _in_class(list(value), c)), None)
    if op == "BRANCH":
        found = (_shortest(list(alt)) for alt in value[1])
        return next((s for s in found if s is not None), None)
    if op == "SUBPATTERN":
        return _shortest(list(value[-1]))
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, _, sub = value
        piece = _shortest(list(sub))
        return "" if low == 0 else (None if piece is None else piece * low)
    if op == "AT":
        return ""
    raise _Unknown(op)


def _in_class(items: list[Any], char: str) -> bool:
    negate = bool(items) and str(items[0][0]) == "NEGATE"
    hit = False
    for op, value in items[1:] if negate else items:
        name = str(op)
        if name == "LITERAL":
            hit = hit or ord(char) == value
        elif name == "RANGE":
            hit = hit or value[0] <= ord(char) <= value[1]
        elif name == "CATEGORY":
            kind = str(value)
            if kind in ("CATEGORY_DIGIT", "CATEGORY_NOT_DIGIT"):
                hit = hit or (char.isdigit() == (kind == "CATEGORY_DIGIT"))
            elif kind in ("CATEGORY_WORD", "CATEGORY_NOT_WORD"):
                word = char.isalnum() or char == "_"
                hit = hit or (word == (kind == "CATEGORY_WORD"))
            elif kind == "CATEGORY_NOT_SPACE":
                hit = True
        else:
            raise _Unknown(name)
    return hit != negate
