"""Exact decision parsing of a pre handler's output, near misses included."""

from __future__ import annotations

import pytest

from sandbox_egress.hookrunner.decision import MAX_REASON_CHARS, near_miss_in_output, parse_decision
from sandbox_egress.hookrunner.outcome import Classified, Outcome

DENY, ALLOW, NEAR = Outcome.DENY, Outcome.ALLOW, Outcome.NEAR_MISS
UNREC, UNPARSE, EMPTY = Outcome.UNRECOGNISED, Outcome.UNPARSEABLE, Outcome.EMPTY_OUTPUT

CASES: list[tuple[str, bytes, Outcome, str | None]] = [
    # (name, output, outcome, deny reason)
    ("deny with reason", b'{"decision": "deny", "reason": "no"}', DENY, "no"),
    ("deny with newline", b'{"decision":"deny","reason":"no"}\n', DENY, "no"),
    ("deny surrounded by JSON whitespace", b' \r\n\t{"decision":"deny"}\n\n', DENY, None),
    ("deny without reason", b'{"decision": "deny"}', DENY, None),
    ("deny with empty reason", b'{"decision": "deny", "reason": "  "}', DENY, None),
    ("deny with non-string reason", b'{"decision": "deny", "reason": 42}', DENY, None),
    ("deny with extra keys", b'{"decision": "deny", "reason": "r", "x": [1]}', DENY, "r"),
    ("deny with unicode reason", '{"decision":"deny","reason":"né"}'.encode(), DENY, "né"),
    ("allow", b'{"decision": "allow"}', ALLOW, None),
    ("allow with reason", b'{"decision": "allow", "reason": "fine"}', ALLOW, None),
    ("empty output", b"", EMPTY, None),
    ("only whitespace", b" \n\t\r\n", EMPTY, None),
    ("empty object", b"{}", UNREC, None),
    ("unknown decision", b'{"decision": "maybe"}', UNREC, None),
    ("decision null", b'{"decision": null}', UNREC, None),
    ("number", b"42", UNREC, None),
    ("JSON string allow", b'"allow"', UNREC, None),
    ("array of allow", b'[{"decision": "allow"}]', UNREC, None),
    ("plain text", b"looks fine to me\n", UNPARSE, None),
    ("truncated JSON", b'{"decision": "de', UNPARSE, None),
    ("NaN is not JSON", b'{"decision": "allow", "n": NaN}', UNPARSE, None),
    ("non-UTF-8 without deny", b"\xff\xfe\x00garbage", UNPARSE, None),
    ("single-quoted pseudo JSON", b"{'decision': 'allow'}", UNPARSE, None),
    # near misses: they allow, and say why
    ("upper-case DENY", b'{"decision": "DENY", "reason": "r"}', NEAR, None),
    ("capitalised Deny", b'{"decision": "Deny"}', NEAR, None),
    ("deny with trailing space", b'{"decision": "deny "}', NEAR, None),
    ("block", b'{"decision": "block", "reason": "r"}', NEAR, None),
    ("blocked", b'{"decision": "blocked"}', NEAR, None),
    ("reject", b'{"decision": "reject"}', NEAR, None),
    ("deny inside an array", b'[{"decision": "deny", "reason": "r"}]', NEAR, None),
    ("deny nested in an object", b'{"result": {"decision": "deny"}}', NEAR, None),
    ("decision key in capitals", b'{"Decision": "deny"}', NEAR, None),
    ("decision as a list", b'{"decision": ["deny"]}', NEAR, None),
    ("claude-code permissionDecision", b'{"permissionDecision": "deny"}', NEAR, None),
    (
        "claude-code nested output",
        b'{"hookSpecificOutput": {"permissionDecision": "deny"}}',
        NEAR,
        None,
    ),
    ("block flag", b'{"block": true}', NEAR, None),
    ("JSON string deny", b'"deny"', NEAR, None),
    ("bare word deny", b"deny\n", NEAR, None),
    ("bare word DENY", b"DENY", NEAR, None),
    ("text before the JSON", b'checking...\n{"decision": "deny", "reason": "r"}\n', NEAR, None),
    ("deny on a later line", b'ok\nok\n{"decision":"deny"}', NEAR, None),
    ("trailing garbage", b'{"decision": "deny", "reason": "r"} trailing', NEAR, None),
    ("two objects", b'{"decision": "deny"}\n{"decision": "deny"}\n', NEAR, None),
    ("duplicate decision keys", b'{"decision": "allow", "decision": "deny"}', NEAR, None),
    ("non-UTF-8 around a deny", b'{"decision": "deny", "reason": "\xff"}', NEAR, None),
    ("UTF-8 BOM before deny", b'\xef\xbb\xbf{"decision": "deny"}', NEAR, None),
    ("python repr of a deny", b"{'decision': 'deny'}", NEAR, None),
]


@pytest.mark.parametrize(
    ("output", "outcome", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_output_is_parsed_exactly(output: bytes, outcome: Outcome, reason: str | None) -> None:
    parsed = parse_decision(output)
    assert (parsed.outcome, parsed.reason) == (outcome, reason)
    assert (parsed.near_miss is not None) == (outcome is Outcome.NEAR_MISS)


@pytest.mark.parametrize(
    ("output", "detail"),
    [
        (
            b'{"decision": "DENY"}',
            '"decision" is \'DENY\', neither "allow" nor "deny"; '
            '"decision" must be exactly "deny", got \'DENY\'',
        ),
        (
            b'[{"decision": "deny"}]',
            "output is a JSON array, not a JSON object; a deny inside an "
            "array does not count ('decision': 'deny' is not a top-level \"decision\": \"deny\")",
        ),
        (b"{}", 'the object has no "decision" key'),
        (b"", "printed nothing"),
        (b"\xff", "output is not UTF-8 (byte offset 0)"),
        (b"nope", "output is not exactly one JSON value: Expecting value at character 0"),
        (
            b'{"decision": "deny"} x',
            "output is not exactly one JSON value: Extra data at "
            'character 21; a deny (\'"decision": "deny\') appears in output that is not one '
            "JSON object",
        ),
    ],
)
def test_details_say_why(output: bytes, detail: str) -> None:
    assert parse_decision(output).detail == detail


def test_truncated_output_is_never_a_deny() -> None:
    parsed = parse_decision(b'{"decision": "deny", "reason": "r"}', truncated=True)
    assert (parsed.outcome, parsed.reason, parsed.detail) == (
        Outcome.TRUNCATED,
        None,
        "output exceeded the 1 MiB cap",
    )


def test_very_long_reason_is_cut_to_the_limit() -> None:
    parsed = parse_decision(b'{"decision": "deny", "reason": "' + b"x" * 10000 + b'"}')
    assert parsed.outcome is Outcome.DENY
    assert parsed.reason == "x" * (MAX_REASON_CHARS - 1) + "\u2026"


def test_deeply_nested_output_is_unparseable_not_a_crash() -> None:
    parsed = parse_decision(b"[" * 100_000 + b"]" * 100_000)
    assert parsed.outcome is Outcome.UNPARSEABLE


@pytest.mark.parametrize(
    ("output", "near"),
    [
        (b'{"decision": "deny"}', 'it printed {"decision": "deny"}'),
        (b'{"decision": "DENY"}', '"decision" must be exactly "deny", got \'DENY\''),
        (b'{"decision": "allow"}', None),
        (b"error: boom", None),
    ],
)
def test_near_miss_in_output_of_a_failed_handler(output: bytes, near: str | None) -> None:
    assert near_miss_in_output(output) == near


def test_a_parsed_decision_is_the_one_classified_type() -> None:
    """One type for what a handler's run came to, whether from its exit or its output."""
    assert parse_decision(b'{"decision": "allow"}') == Classified(Outcome.ALLOW, "allowed")
