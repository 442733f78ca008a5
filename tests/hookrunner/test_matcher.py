"""Matchers: RE2, whole-name, match-all spellings, invalid patterns match nothing."""

from __future__ import annotations

import pytest

from sandbox_egress.hookrunner.matcher import compile_matcher

TOOLS = ("code_execution", "read_file", "write_file", "list_files", "delete_file")

CASES = [
    # (name, pattern, tools it must match; every other built-in must not match)
    ("exact name", "code_execution", {"code_execution"}),
    ("alternation", "read_file|write_file", {"read_file", "write_file"}),
    ("regex suffix", ".*_file", {"read_file", "write_file", "delete_file"}),
    ("star matches all", "*", set(TOOLS)),
    ("empty matches all", "", set(TOOLS)),
    ("dot star matches all", ".*", set(TOOLS)),
    ("prefix is not enough", "code", set()),
    ("suffix is not enough", "file", set()),
    ("anchors are harmless", "^read_file$", {"read_file"}),
    ("case sensitive", "READ_FILE", set()),
    ("case-insensitive flag", "(?i)READ_FILE", {"read_file"}),
    ("character class", "(read|list)_files?", {"read_file", "list_files"}),
    ("shell glob is invalid RE2", "*_file", set()),
    ("look-ahead is invalid RE2", "(?=read)read_file", set()),
    ("back-reference is invalid RE2", "(read)_\\1", set()),
    ("possessive is invalid RE2", "read_file++", set()),
]


@pytest.mark.parametrize(("pattern", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_exactly_the_expected_builtin_tools(pattern: str, expected: set[str]) -> None:
    matcher = compile_matcher(pattern)
    assert {tool for tool in TOOLS if matcher.matches(tool)} == expected


@pytest.mark.parametrize(
    ("pattern", "tool", "matches"),
    [
        ("code_execution", "code_execution_v2", False),
        ("code_execution", "my_code_execution", False),
        ("code_execution", "code_execution\n", False),
        (".*_file", "custom_file", True),
        ("*", "anything-at-all", True),
        ("", "", True),
        ("mcp__.*", "mcp__github__create_issue", True),
    ],
)
def test_other_tool_names_are_matched_the_same_way(pattern: str, tool: str, matches: bool) -> None:
    assert compile_matcher(pattern).matches(tool) is matches


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("*_file", "not a valid RE2 pattern (no argument for repetition operator: *)"),
        ("(?=x)", "not a valid RE2 pattern (invalid perl operator: (?=)"),
        ("a++", "not a valid RE2 pattern (bad repetition operator: ++)"),
        ("(unclosed", "not a valid RE2 pattern (missing ): (unclosed)"),
    ],
)
def test_invalid_pattern_carries_the_re2_error(pattern: str, error: str) -> None:
    matcher = compile_matcher(pattern)
    assert (matcher.valid, matcher.error) == (False, error)


def test_valid_patterns_have_no_error_and_match_all_is_flagged() -> None:
    assert [
        (compile_matcher(p).valid, compile_matcher(p).matches_all) for p in ("*", "", ".*")
    ] == [(True, True)] * 3
    assert (compile_matcher("read_file").valid, compile_matcher("read_file").matches_all) == (
        True,
        False,
    )


def test_invalid_pattern_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    compile_matcher("*_file")
    assert capfd.readouterr().err == ""
