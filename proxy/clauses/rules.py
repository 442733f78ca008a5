"""Rules inside an allowed host: which methods, paths and queries an entry admits
(docs/configuration.md#rules).

`parse_rules` turns an entry's `rules` / `deny` lists (already shaped by the JSON Schema)
into a frozen `Rules`, reporting every problem at its location
(`network.allowlist[2].rules[1].paths[0]`). `judge` is the pure decision: given a
method and the origin-form request-target, which clause admits or refuses it.

Invariants:
* Matching happens only on the canonical path (`proxy.paths.canonical_path`); a path
  with an ambiguous spelling is refused (`bad_request`), never matched loosely.
* A deny rule wins over every allow rule; with `rules` present, a request no rule
  matches is refused. The verdict names the clause (`rules[1]`, `deny[0]`) for the
  audit line.
* Patterns are compiled once, at load; `judge` does no parsing beyond the target.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from sandbox_egress.proxy.fields import METHOD_OVERRIDES
from sandbox_egress.proxy.paths import canonical_path, split_target

Report = Callable[[str, str], None]  # (location, message)


class Verdict(StrEnum):
    """What an entry's rules (or its `git`, proxy.gitpush) say of a request; the request
    stage turns it into a `Reason` (this module does not import the decision, which
    imports the configuration that imports this)."""

    ALLOW = "allow"
    MISMATCH = "mismatch"  # rule_mismatch
    DENIED = "denied"  # rule_denied
    AMBIGUOUS = "ambiguous"  # bad_request: a path an upstream could read two ways
    PUSH_DENIED = "push_denied"  # git_push_denied


_METHOD = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: every field present must match; an absent field matches everything."""

    methods: frozenset[str] | None = None
    paths: tuple[re.Pattern[str], ...] | None = None
    query: tuple[tuple[str, re.Pattern[str]], ...] | None = None

    def matches(self, method: str, path: str, query: dict[str, list[str]]) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        if self.paths is not None and not any(p.fullmatch(path) for p in self.paths):
            return False
        if self.query is not None:
            for name, glob in self.query:
                values = query.get(name)
                # Absent or repeated: an upstream may read either copy, so no match.
                if values is None or len(values) != 1 or not glob.fullmatch(values[0]):
                    return False
        return True


@dataclass(frozen=True, slots=True)
class Rules:
    allow: tuple[Rule, ...] | None = None  # None: `rules` absent, every request matches
    deny: tuple[Rule, ...] = ()
    allow_encoded_slash: bool = False
    # Every rule's paths as one alternation, so that one regex call finds the first rule
    # whose paths match (built by `__post_init__`; the rules before it cannot match).
    _first_allow: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _first_deny: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_first_allow", _first_path(self.allow or ()))
        object.__setattr__(self, "_first_deny", _first_path(self.deny))

    @property
    def active(self) -> bool:
        return self.allow is not None or bool(self.deny)


def _first_path(rules: tuple[Rule, ...]) -> re.Pattern[str] | None:
    if not rules:
        return None
    parts = []
    for index, rule in enumerate(rules):
        paths = "|".join(p.pattern for p in rule.paths) if rule.paths is not None else ".*"
        parts.append(f"(?P<r{index}>{paths})")
    return re.compile("|".join(parts), re.DOTALL)


def _first(
    rules: tuple[Rule, ...],
    first: re.Pattern[str] | None,
    method: str,
    path: str,
    query: dict[str, list[str]],
) -> int | None:
    """The index of the first rule matching the request, or None."""
    found = first.fullmatch(path) if first is not None else None
    if found is None or found.lastgroup is None:
        return None
    for index in range(int(found.lastgroup[1:]), len(rules)):
        if rules[index].matches(method, path, query):
            return index
    return None


NO_RULES = Rules()

# Fields that turn a request into another method on upstreams that honour them (1.8), as
# the head's bytes name them (one list, `proxy.fields`: the resend rule reads it too, D682).
OVERRIDES = frozenset(name.encode() for name in METHOD_OVERRIDES)


def override_methods(fields: tuple[tuple[bytes, bytes], ...]) -> tuple[str, ...]:
    """The method each override field names, every occurrence, value stripped of spaces
    (a list such as `GET, DELETE` stays one value, which no method token matches).

    Every request asks, and almost none has such a field: a plain loop finds the first
    one (half the cost of a generator's set-up on a short head), and only then are the
    fields read again for every occurrence."""
    for name, _ in fields:
        if name.lower() in OVERRIDES:
            return tuple(
                value.strip(b" \t").decode("utf-8", "surrogateescape")
                for name, value in fields
                if name.lower() in OVERRIDES
            )
    return ()


def judge(
    rules: Rules, method: str, target: str, overrides: tuple[str, ...] = ()
) -> tuple[Verdict, str]:
    """Whether `rules` admit `method` on the origin-form `target` (the path and query):
    `allowlisted`, `rule_denied`, `rule_mismatch`, or `bad_request` (an ambiguous path),
    with the clause that decided (`rules[1]`, `deny[0]`; "" when none did). Each of
    `overrides` (the methods override fields name) must be admitted too; the first one
    refused decides, else the sent method's clause."""
    raw_path, raw_query = split_target(target)
    path = canonical_path(raw_path, allow_encoded_slash=rules.allow_encoded_slash)
    if path is None:
        return Verdict.AMBIGUOUS, ""
    query = _query(raw_query) if raw_query else {}
    verdict = _judge_method(rules, method, path, query)
    for named in overrides if verdict[0] is Verdict.ALLOW else ():
        refused = _judge_method(rules, named, path, query)
        if refused[0] is not Verdict.ALLOW:
            return refused
    return verdict


def _judge_method(
    rules: Rules, method: str, path: str, query: dict[str, list[str]]
) -> tuple[Verdict, str]:
    denied = _first(rules.deny, rules._first_deny, method, path, query)
    if denied is not None:
        return Verdict.DENIED, f"deny[{denied}]"
    if rules.allow is None:
        return Verdict.ALLOW, ""
    allowed = _first(rules.allow, rules._first_allow, method, path, query)
    if allowed is not None:
        return Verdict.ALLOW, f"rules[{allowed}]"
    return Verdict.MISMATCH, ""


def _query(raw: str) -> dict[str, list[str]]:
    """Parameters by decoded name; `+` is kept as it is (servers disagree on it)."""
    found: dict[str, list[str]] = {}
    for pair in raw.split("&") if raw else ():
        name, _, value = pair.partition("=")
        found.setdefault(unquote(name), []).append(unquote(value))
    return found


# -- loading ---------------------------------------------------------------------------


def parse_rules(raw: dict[str, Any], where: str, report: Report) -> Rules | None:
    """The entry's `rules`, `deny` and `allow_encoded_slash`; None when any is refused."""
    slash = raw.get("allow_encoded_slash") is True
    ok = True
    lists: dict[str, tuple[Rule, ...] | None] = {"rules": None, "deny": ()}
    for key in ("rules", "deny"):
        if key not in raw:
            continue
        items = raw[key]
        if not isinstance(items, list) or not items:
            report(f"{where}.{key}", "must be a non-empty list of rules")
            ok = False
            continue
        parsed = [_rule(item, f"{where}.{key}[{i}]", slash, report) for i, item in enumerate(items)]
        rules = tuple(r for r in parsed if r is not None)
        ok = ok and len(rules) == len(parsed)
        lists[key] = rules
    if not ok:
        return None
    return Rules(lists["rules"], lists["deny"] or (), slash)


def _rule(raw: Any, where: str, slash: bool, report: Report) -> Rule | None:
    if not isinstance(raw, dict):
        report(where, "a rule must be a mapping of methods, paths and/or query")
        return None
    unknown = sorted(str(k) for k in raw if k not in ("methods", "paths", "query"))
    if unknown:
        report(where, f"unknown key {unknown[0]!r} (expected: methods, paths, query)")
        return None
    if not raw:
        report(where, "a rule needs at least one of methods, paths, query")
        return None
    ok = True
    methods = paths = query = None
    if "methods" in raw:
        methods = _methods(raw["methods"], f"{where}.methods", report)
        ok = ok and methods is not None
    if "paths" in raw:
        paths = _paths(raw["paths"], f"{where}.paths", slash, report)
        ok = ok and paths is not None
    if "query" in raw:
        query = _queries(raw["query"], f"{where}.query", report)
        ok = ok and query is not None
    return Rule(methods, paths, query) if ok else None


def _methods(raw: Any, where: str, report: Report) -> frozenset[str] | None:
    if not isinstance(raw, list) or not raw:
        report(where, "must be a non-empty list of methods")
        return None
    bad = [m for m in raw if not isinstance(m, str) or not _METHOD.fullmatch(m)]
    if bad:
        report(where, f"invalid method {bad[0]!r} (a token such as GET)")
        return None
    for index, method in enumerate(raw):
        problem = method_problem(method)
        if problem is not None:
            report(f"{where}[{index}]", problem)
            return None
    return frozenset(raw)


# IANA's HTTP Method Registry (RFC 9110, PATCH, WebDAV, CalDAV, DeltaV, ...) and QUERY.
# A method is compared byte for byte (`get` is not `GET`, docs/configuration.md#rules),
# so a rule naming a method outside it, or one in lower case, almost surely never
# matches: `check` says so.
# fmt: off
KNOWN_METHODS = frozenset((
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY",
    "ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "COPY", "LABEL", "LINK", "LOCK",
    "MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE",
    "ORDERPATCH", "PRI", "PROPFIND", "PROPPATCH", "REBIND", "REPORT", "SEARCH", "UNBIND",
    "UNCHECKOUT", "UNLINK", "UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
))
# fmt: on


def method_problem(method: str) -> str | None:
    """Why a rule's method can never match a request, with a did-you-mean; None if fine."""
    if method in KNOWN_METHODS:
        return None
    if method.upper() in KNOWN_METHODS:
        return f"method {method!r} must be written in upper case: {method.upper()!r}"
    close = difflib.get_close_matches(method.upper(), sorted(KNOWN_METHODS), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else f" ({', '.join(sorted(KNOWN_METHODS))})"
    return f"unknown method {method!r}{hint}"


def _paths(raw: Any, where: str, slash: bool, report: Report) -> tuple[re.Pattern[str], ...] | None:
    if not isinstance(raw, list) or not raw:
        report(where, "must be a non-empty list of path patterns")
        return None
    compiled = []
    for index, pattern in enumerate(raw):
        problem = path_pattern_problem(pattern, slash)
        if problem is not None:
            report(f"{where}[{index}]", f"{problem} (got {pattern!r})")
            continue
        compiled.append(compile_path(canonical_path(pattern, allow_encoded_slash=slash) or ""))
    return tuple(compiled) if len(compiled) == len(raw) else None


def path_pattern_problem(pattern: Any, slash: bool = False) -> str | None:
    """Why `pattern` is not a path pattern, or None."""
    if not isinstance(pattern, str) or not pattern.startswith("/"):
        return "a path pattern must begin with '/'"
    if "?" in pattern or "#" in pattern:
        return "a path pattern has no query or fragment (use query: for parameters)"
    if any("**" in s and s != "**" for s in pattern.split("/")):
        return "'**' must be a whole segment"
    if not all("!" <= c <= "~" for c in pattern):
        return "a path pattern is visible ASCII (percent-encode anything else)"
    if canonical_path(pattern, allow_encoded_slash=slash) is None:
        return (
            "an ambiguous path (an encoded '/', '\\' or '.', a ';', "
            "or a '.', '..' or empty segment)"
        )
    return None


def compile_path(pattern: str) -> re.Pattern[str]:
    """`*` within one segment; `**` zero or more segments (one or more at the end)."""
    segments = pattern.split("/")[1:]
    parts: list[str] = []
    for position, segment in enumerate(segments):
        if segment == "**":
            parts.append("(?:/[^/]*)+" if position == len(segments) - 1 else "(?:/[^/]*)*")
        else:
            parts.append("/" + "[^/]*".join(re.escape(p) for p in segment.split("*")))
    return re.compile("".join(parts))


def compile_glob(glob: str) -> re.Pattern[str]:
    """A query glob: `*` matches any run of characters, everything else is literal."""
    return re.compile(".*".join(re.escape(p) for p in glob.split("*")), re.DOTALL)


def _queries(
    raw: Any, where: str, report: Report
) -> tuple[tuple[str, re.Pattern[str]], ...] | None:
    if not isinstance(raw, dict) or not raw:
        report(where, "must be a non-empty mapping of parameter name to glob")
        return None
    bad = [k for k, v in raw.items() if not isinstance(k, str) or not k or not isinstance(v, str)]
    if bad:
        report(where, f"parameter {str(bad[0])!r}: name and glob must be non-empty strings")
        return None
    return tuple((name, compile_glob(glob)) for name, glob in raw.items())
