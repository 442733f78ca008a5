"""Rules on allowlist entries (docs/configuration.md#rules): the located configuration problems, the pattern
language, and the one path canonicaliser (proxy/paths.py). Decisions are in
tests/proxy/test_stages.py (RULE_REQUESTS); the canonicaliser against real servers in
tests/proxy/test_paths_upstreams.py."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy.clauses.rules import compile_path
from sandbox_egress.proxy.config.loader import ConfigError, parse
from sandbox_egress.proxy.paths import canonical_path


def problems_of(*allowlist: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse({"network": {"allowlist": list(allowlist)}}, "env.yaml", {})
    return [str(p) for p in info.value.problems]


INVALID = [
    ("empty-rules", {"domain": "a.example", "rules": []},
     "env.yaml: network.allowlist[0].rules: must be a non-empty list of rules"),
    ("empty-deny", {"domain": "a.example", "deny": []},
     "env.yaml: network.allowlist[0].deny: must be a non-empty list of rules"),
    ("rule-without-field", {"domain": "a.example", "rules": [{"methods": ["GET"]}, {}]},
     "env.yaml: network.allowlist[0].rules[1]: a rule needs at least one of methods, paths, query"),
    ("path-without-slash", {"domain": "a.example", "rules": [{"paths": ["/ok", "repos/*"]}]},
     "env.yaml: network.allowlist[0].rules[0].paths[1]: a path pattern must begin with '/'"),
    ("double-star-inside-segment", {"domain": "a.example", "deny": [{"paths": ["/a**"]}]},
     "env.yaml: network.allowlist[0].deny[0].paths[0]: '**' must be a whole segment"),
    ("ambiguous-pattern", {"domain": "a.example", "rules": [{"paths": ["/a/../b"]}]},
     "env.yaml: network.allowlist[0].rules[0].paths[0]: an ambiguous path"),
    ("encoded-slash-pattern", {"domain": "a.example", "rules": [{"paths": ["/@a%2f*"]}]},
     "env.yaml: network.allowlist[0].rules[0].paths[0]: an ambiguous path"),
    ("query-in-pattern", {"domain": "a.example", "rules": [{"paths": ["/a?b=1"]}]},
     "network.allowlist[0].rules[0].paths[0]: a path pattern has no query"),
    ("rules-and-passthrough", {"domain": "a.example", "passthrough": True,
     "rules": [{"methods": ["GET"]}]},
     "env.yaml: network.allowlist[0].passthrough: a pass-through entry is not intercepted, so "
     "its rules could not be applied"),
    ("unknown-rule-key", {"domain": "a.example", "rules": [{"method": ["GET"]}]},
     "env.yaml: network.allowlist[0].rules[0]: unknown key 'method'"),
    ("bad-method", {"domain": "a.example", "rules": [{"methods": ["GET POST"]}]},
     "env.yaml: network.allowlist[0].rules[0].methods[0]: invalid method"),
    ("lower-case-method", {"domain": "a.example", "rules": [{"methods": ["GET", "get"]}]},
     "env.yaml: network.allowlist[0].rules[0].methods[1]: method 'get' must be written in upper "
     "case: 'GET'"),
    ("misspelt-method", {"domain": "a.example", "rules": [{"methods": ["PSOT"]}]},
     "env.yaml: network.allowlist[0].rules[0].methods[0]: unknown method 'PSOT'; did you mean "
     "'POST'?"),
    ("unknown-method", {"domain": "a.example", "deny": [{"methods": ["ZZZZZZ"]}]},
     "env.yaml: network.allowlist[0].deny[0].methods[0]: unknown method 'ZZZZZZ' (ACL, "),
    ("empty-methods", {"domain": "a.example", "rules": [{"methods": []}]},
     "env.yaml: network.allowlist[0].rules[0].methods: must be a non-empty list of methods"),
    ("query-not-mapping", {"domain": "a.example", "rules": [{"query": ["q"]}]},
     "env.yaml: network.allowlist[0].rules[0].query: must be a non-empty mapping"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_a_rule_problem_names_its_location(entry: object, expected: str) -> None:
    problems = problems_of(entry)
    assert any(expected in p for p in problems), problems


def test_every_rule_problem_is_reported() -> None:
    problems = problems_of(
        {"domain": "a.example", "rules": [{"paths": ["x"]}, {"paths": ["/a/./b"]}]},
        {"domain": "b.example", "deny": []},
    )
    assert [p.split(": ")[1] for p in problems] == [
        "network.allowlist[0].rules[0].paths[0]",
        "network.allowlist[0].rules[1].paths[0]",
        "network.allowlist[1].deny",
    ]


def test_rules_load_into_the_entry() -> None:
    config = parse(
        {"network": {"allowlist": [
            {"domain": "a.example", "rules": [{"methods": ["GET"]}], "deny": [{"paths": ["/x"]}]},
            {"domain": "b.example"},
        ]}},
        "env.yaml",
        {},
    )  # fmt: skip
    ruled, plain = config.allowlist
    assert ruled.rules.active and ruled.rules.allow is not None and len(ruled.rules.deny) == 1
    assert not plain.rules.active


PATTERNS = [
    # (pattern, path, matches)
    ("/a/**/z", "/a/z", True),
    ("/a/**/z", "/a/b/c/z", True),
    ("/a/**/z", "/a/bz", False),
    ("/x/**", "/x", False),
    ("/x/**", "/x/", True),
    ("/x/**", "/x/y/z", True),
    ("/x/*", "/x/y", True),
    ("/x/*", "/x/y/z", False),
    ("/x/*.git", "/x/web.git", True),
    ("/X", "/x", False),
    ("/**", "/", True),
    ("/", "/", True),
    ("/", "/a", False),
    ("/a.b", "/aXb", False),
]  # fmt: skip


@pytest.mark.parametrize(("pattern", "path", "matches"), PATTERNS)
def test_path_patterns(pattern: str, path: str, matches: bool) -> None:
    assert (compile_path(pattern).fullmatch(path) is not None) is matches


CANONICAL = [
    ("/a/b", "/a/b"),
    ("/%61%2D%5f%7E", "/a-_~"),
    ("/a%20b", "/a%20b"),
    ("/a%3fb", "/a%3Fb"),
    ("/a/", "/a/"),
    ("/a/b.c/..d", "/a/b.c/..d"),
    ("/a//b", None),
    ("//a", None),
    ("/a/./b", None),
    ("/a/..", None),
    ("/.", None),
    ("/a%2fb", None),
    ("/a%2Eb", None),
    ("/a%5Cb", None),
    ("/a%00", None),
    ("/a\\b", None),
    ("/a\0", None),
    ("/a%", None),
    ("/a%4", None),
    ("/a%g0", None),
    ("/a;b", None),
    ("a", None),
    ("*", None),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "canonical"), CANONICAL)
def test_canonical_path(raw: str, canonical: str | None) -> None:
    assert canonical_path(raw) == canonical


def test_encoded_slash_is_kept_only_when_the_entry_allows_it() -> None:
    assert canonical_path("/@acme%2fpkg", allow_encoded_slash=True) == "/@acme%2Fpkg"
    assert canonical_path("/@acme%2fpkg") is None
    assert canonical_path("/@acme%2e%2e", allow_encoded_slash=True) is None
