"""hooks.json schema: every problem with its JSON path and reason; what survives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandbox_egress.hookrunner.model import CommandHandler, Event, HttpHandler
from sandbox_egress.hookrunner.schema import loads_strict, validate_document

F = "/x/hooks.json"
CMD = {"type": "command", "command": "true"}
HTTP = {"type": "http", "url": "https://telemetry.example.com/api/v1/agent-events"}


def doc(handler: Any, *, matcher: Any = "code_execution", event: str = "pre_tool_execution"):
    return {"g": {event: [{"matcher": matcher, "hooks": [handler]}]}}


SKIP_H = "; handler skipped"
P = "$.g.pre_tool_execution[0]"

CASES: list[tuple[str, Any, list[tuple[str, str]], int]] = [
    # (name, document, [(json path, reason)], number of handlers that survive)
    ("minimal command", doc(CMD), [], 1),
    ("minimal http", doc(HTTP), [], 1),
    (
        "source example",
        {
            "security-gate": {
                "enabled": True,
                "pre_tool_execution": [
                    {
                        "matcher": "code_execution",
                        "hooks": [{"type": "command", "command": "python3 gate.py", "timeout": 10}],
                    }
                ],
            },
            "auto-format": {
                "post_tool_execution": [
                    {
                        "matcher": "*",
                        "hooks": [{"type": "command", "command": "python3 lint.py", "timeout": 15}],
                    }
                ]
            },
        },
        [],
        2,
    ),
    ("empty document", {}, [], 0),
    ("empty group", {"g": {}}, [], 0),
    ("document not an object", [], [("$", "the document must be an object, got an array")], 0),
    (
        "group not an object",
        {"g": []},
        [("$.g", "group must be an object, got an array; skipped")],
        0,
    ),
    (
        "enabled not a bool",
        {"g": {"enabled": "false", "pre_tool_execution": [{"matcher": "", "hooks": [CMD]}]}},
        [("$.g.enabled", "must be true or false, got a string; group skipped")],
        0,
    ),
    (
        "event not a list",
        {"g": {"pre_tool_execution": {"matcher": ""}}},
        [("$.g.pre_tool_execution", "must be an array of rules, got an object; group skipped")],
        0,
    ),
    (
        "unknown group key is ignored",
        {"g": {"comment": "x", "pre_tool_execution": [{"matcher": "", "hooks": [CMD]}]}},
        [("$.g.comment", "unknown key in group (ignored)")],
        1,
    ),
    (
        "misspelt event is reported",
        {"g": {"pre_tool_exection": []}},
        [
            (
                "$.g.pre_tool_exection",
                "unknown key in group (ignored); did you mean 'pre_tool_execution'?",
            )
        ],
        0,
    ),
    (
        "group name needing quotes",
        {"security gate": {"pre_tool_execution": 1}},
        [
            (
                '$["security gate"].pre_tool_execution',
                "must be an array of rules, got a number; group skipped",
            )
        ],
        0,
    ),
    (
        "rule not an object",
        {"g": {"pre_tool_execution": ["x"]}},
        [(P, "rule must be an object, got a string; skipped")],
        0,
    ),
    (
        "rule without hooks",
        {"g": {"pre_tool_execution": [{"matcher": ""}]}},
        [(P, 'missing required key "hooks"; rule skipped')],
        0,
    ),
    (
        "hooks not a list",
        {"g": {"pre_tool_execution": [{"matcher": "", "hooks": CMD}]}},
        [(f"{P}.hooks", "must be an array of handlers, got an object; rule skipped")],
        0,
    ),
    (
        "matcher not a string",
        doc(CMD, matcher=1),
        [(f"{P}.matcher", "must be a string, got a number; rule skipped")],
        0,
    ),
    ("matcher missing means all", {"g": {"pre_tool_execution": [{"hooks": [CMD]}]}}, [], 1),
    (
        "invalid RE2 is reported, rule kept",
        doc(CMD, matcher="*_file"),
        [
            (
                f"{P}.matcher",
                '"*_file" is not a valid RE2 pattern (no argument for repetition '
                "operator: *); matches nothing",
            )
        ],
        1,
    ),
    (
        "unknown rule key",
        {"g": {"pre_tool_execution": [{"matcher": "", "hooks": [], "x": 1}]}},
        [(f"{P}.x", "unknown key in rule (ignored)")],
        0,
    ),
    (
        "handler not an object",
        doc("true"),
        [(f"{P}.hooks[0]", "a handler must be an object, got a string" + SKIP_H)],
        0,
    ),
    (
        "handler without type",
        doc({"command": "true"}),
        [(f"{P}.hooks[0].type", 'must be "command" or "http", got missing' + SKIP_H)],
        0,
    ),
    (
        "unknown handler type",
        doc({"type": "prompt", "prompt": "x"}),
        [(f"{P}.hooks[0].type", 'must be "command" or "http", got "prompt"' + SKIP_H)],
        0,
    ),
    (
        "type not a string",
        doc({"type": ["command"]}),
        [(f"{P}.hooks[0].type", 'must be "command" or "http", got ["command"]' + SKIP_H)],
        0,
    ),
    (
        "timeout zero",
        doc({**CMD, "timeout": 0}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got 0" + SKIP_H)],
        0,
    ),
    (
        "timeout negative",
        doc({**CMD, "timeout": -5}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got -5" + SKIP_H)],
        0,
    ),
    (
        "timeout float",
        doc({**CMD, "timeout": 1.5}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got 1.5" + SKIP_H)],
        0,
    ),
    (
        "timeout whole float",
        doc({**CMD, "timeout": 10.0}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got 10.0" + SKIP_H)],
        0,
    ),
    (
        "timeout string",
        doc({**CMD, "timeout": "10"}),
        [(f"{P}.hooks[0].timeout", 'must be a positive integer of seconds, got "10"' + SKIP_H)],
        0,
    ),
    (
        "timeout bool",
        doc({**CMD, "timeout": True}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got true" + SKIP_H)],
        0,
    ),
    (
        "timeout null",
        doc({**CMD, "timeout": None}),
        [(f"{P}.hooks[0].timeout", "must be a positive integer of seconds, got null" + SKIP_H)],
        0,
    ),
    (
        "command missing",
        doc({"type": "command"}),
        [(f"{P}.hooks[0].command", "must be a non-empty string" + SKIP_H)],
        0,
    ),
    (
        "command blank",
        doc({"type": "command", "command": "  "}),
        [(f"{P}.hooks[0].command", "must be a non-empty string" + SKIP_H)],
        0,
    ),
    (
        "command with NUL",
        doc({"type": "command", "command": "a\x00b"}),
        [(f"{P}.hooks[0].command", "must not contain a NUL character" + SKIP_H)],
        0,
    ),
    (
        "unknown handler key",
        doc({**CMD, "blockOnFailure": True}),
        [(f"{P}.hooks[0].blockOnFailure", "unknown key in handler (ignored)")],
        1,
    ),
    (
        "http key on a command",
        doc({**CMD, "url": "https://a.example"}),
        [(f"{P}.hooks[0].url", "unknown key in handler (ignored)")],
        1,
    ),
    (
        "http plain URL",
        doc({**HTTP, "url": "http://a.example/x"}),
        [(f"{P}.hooks[0].url", "must be an https:// URL" + SKIP_H)],
        0,
    ),
    (
        "http URL missing",
        doc({"type": "http"}),
        [(f"{P}.hooks[0].url", "must be a non-empty string" + SKIP_H)],
        0,
    ),
    (
        "http URL without host",
        doc({**HTTP, "url": "https:///x"}),
        [(f"{P}.hooks[0].url", "has no host" + SKIP_H)],
        0,
    ),
    (
        "http URL with credentials",
        doc({**HTTP, "url": "https://u:p@a.example/"}),
        [
            (
                f"{P}.hooks[0].url",
                "must not carry credentials (use the egress proxy's transform)" + SKIP_H,
            )
        ],
        0,
    ),
    (
        "http URL bad port",
        doc({**HTTP, "url": "https://a.example:99999/"}),
        [(f"{P}.hooks[0].url", "is not a valid URL" + SKIP_H)],
        0,
    ),
    (
        "http URL with space",
        doc({**HTTP, "url": "https://a.example/a b"}),
        [(f"{P}.hooks[0].url", "must not contain whitespace or control characters" + SKIP_H)],
        0,
    ),
    ("http headers ok", doc({**HTTP, "headers": {"X-Event-Source": "agent-sandbox"}}), [], 1),
    (
        "http headers not an object",
        doc({**HTTP, "headers": ["X"]}),
        [
            (
                f"{P}.hooks[0].headers",
                "must be an object of header names to strings, got an array" + SKIP_H,
            )
        ],
        0,
    ),
    (
        "http header value not a string",
        doc({**HTTP, "headers": {"X-N": 1}}),
        [(f'{P}.hooks[0].headers["X-N"]', "must be a string, got a number" + SKIP_H)],
        0,
    ),
    (
        "http header with CRLF",
        doc({**HTTP, "headers": {"X-A": "a\r\nInjected: 1"}}),
        [
            (
                f'{P}.hooks[0].headers["X-A"]',
                "must not contain control characters (CR, LF, NUL...)" + SKIP_H,
            )
        ],
        0,
    ),
    (
        "http header bad name",
        doc({**HTTP, "headers": {"X A": "1"}}),
        [(f'{P}.hooks[0].headers["X A"]', "is not a valid header name" + SKIP_H)],
        0,
    ),
    (
        "http header reserved",
        doc({**HTTP, "headers": {"Host": "evil.example"}}),
        [(f"{P}.hooks[0].headers.Host", "is set by the runner and cannot be configured" + SKIP_H)],
        0,
    ),
    (
        "http header twice by case",
        doc({**HTTP, "headers": {"X-A": "1", "x-a": "2"}}),
        [
            (
                f'{P}.hooks[0].headers["x-a"]',
                "the same header is given twice (names ignore case)" + SKIP_H,
            )
        ],
        0,
    ),
    (
        "one bad handler, the rest runs",
        {
            "g": {
                "pre_tool_execution": [{"matcher": "", "hooks": [CMD, {**CMD, "timeout": 0}, HTTP]}]
            }
        },
        [(f"{P}.hooks[1].timeout", "must be a positive integer of seconds, got 0" + SKIP_H)],
        2,
    ),
    (
        "one bad group, the other runs",
        {"bad": [], "good": {"pre_tool_execution": [{"matcher": "", "hooks": [CMD]}]}},
        [("$.bad", "group must be an object, got an array; skipped")],
        1,
    ),
]


def _handlers(groups: list[Any]) -> list[Any]:
    return [h for g in groups for r in (*g.pre, *g.post) for h in r.handlers]


@pytest.mark.parametrize(
    ("document", "problems", "surviving"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_schema_table(document: Any, problems: list[tuple[str, str]], surviving: int) -> None:
    groups, found = validate_document(loads_strict(json.dumps(document)), F)
    assert [(p.file, p.location, p.message) for p in found] == [(F, *p) for p in problems]
    assert len(_handlers(groups)) == surviving


def test_values_become_frozen_typed_handlers() -> None:
    document = {
        "security-gate": {
            "pre_tool_execution": [
                {"matcher": "code_execution", "hooks": [{**CMD, "timeout": 10}]},
            ],
            "post_tool_execution": [
                {"matcher": ".*", "hooks": [{**HTTP, "headers": {"X-Event-Source": "sandbox"}}]}
            ],
        }
    }
    groups, problems = validate_document(loads_strict(json.dumps(document)), F)
    assert problems == []
    [group] = groups
    assert (group.name, group.enabled, group.source) == ("security-gate", True, F)
    assert group.pre[0].handlers == (
        CommandHandler("true", 10, f'{F} $["security-gate"].pre_tool_execution[0].hooks[0]'),
    )
    assert group.post[0].handlers == (
        HttpHandler(
            HTTP["url"],
            (("X-Event-Source", "sandbox"),),
            30,
            f'{F} $["security-gate"].post_tool_execution[0].hooks[0]',
        ),
    )
    with pytest.raises(AttributeError):
        group.enabled = False  # type: ignore[misc]


def test_disabled_group_is_loaded_but_disabled() -> None:
    groups, problems = validate_document({"g": {"enabled": False}}, F)
    assert (problems, [g.enabled for g in groups]) == ([], [False])


DUPLICATES: list[tuple[str, str, list[tuple[str, str]], int]] = [
    (
        "group name twice: both run",
        '{"g": {"pre_tool_execution": [{"hooks": [{"type": "command", "command": "a"}]}]},'
        ' "g": {"pre_tool_execution": [{"hooks": [{"type": "command", "command": "b"}]}]}}',
        [("$.g", "group name used twice; both groups run")],
        2,
    ),
    (
        "key twice in a handler: skipped",
        '{"g": {"pre_tool_execution": [{"hooks": [{"type": "command", "command": "a",'
        ' "timeout": 5, "timeout": 50}]}]}}',
        [
            (
                "$.g.pre_tool_execution[0].hooks[0].timeout",
                "duplicate key in handler; handler skipped",
            )
        ],
        0,
    ),
    (
        "key twice in a group: skipped",
        '{"g": {"enabled": true, "enabled": false}}',
        [("$.g.enabled", "duplicate key in group; group skipped")],
        0,
    ),
]


@pytest.mark.parametrize(
    ("text", "problems", "surviving"), [c[1:] for c in DUPLICATES], ids=[c[0] for c in DUPLICATES]
)
def test_duplicate_keys(text: str, problems: list[tuple[str, str]], surviving: int) -> None:
    groups, found = validate_document(loads_strict(text), F)
    assert [(p.location, p.message) for p in found] == problems
    assert len(_handlers(groups)) == surviving


SECRET = "ghp_7d3c1a9e-never-print-me"


@pytest.mark.parametrize(
    "handler",
    [
        {**HTTP, "headers": {"Authorization": f"Bearer {SECRET}\r\nX: 1"}},
        {**HTTP, "headers": {"Authorization": [SECRET]}},
        {**HTTP, "headers": {"Host": SECRET}},
        {**HTTP, "headers": {"X-Key": SECRET, "x-key": SECRET}},
        {**HTTP, "url": f"https://user:{SECRET}@telemetry.example.com/"},
        {**HTTP, "url": f"http://telemetry.example.com/?token={SECRET}"},
        {**CMD, "command": f"curl -H 'X-Key: {SECRET}'\x00", "timeout": 5},
        {"type": "command", "command": [SECRET]},
    ],
    ids=["crlf", "list", "reserved", "twice", "credentials", "plain", "nul", "list command"],
)
def test_a_refused_value_is_never_printed(handler: Any) -> None:
    groups, found = validate_document(doc(handler), F)
    assert [g.rules(Event.PRE)[0].handlers for g in groups] == [()]
    assert found != []
    assert [str(p) for p in found if SECRET[4:] in str(p)] == []
