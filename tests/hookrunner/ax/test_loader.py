"""Loading .ax-code/hooks.json: trust, the operator switches, validation, packs, matchers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.loader import full_env_switch, load_ax_config, trust_switch
from sandbox_egress.hookrunner.ax.matcher import compile_ax_matcher
from sandbox_egress.hookrunner.ax.model import AxEvent, Protocol
from sandbox_egress.hookrunner.ax.packs.catalogue import PACKS
from tests.hookrunner.ax.conftest import AxEnv, cc, entry

HOOK = entry("PreToolUse", "true", matcher="bash")


@pytest.mark.parametrize(
    ("environ", "flag", "on", "notice"),
    [
        ({}, None, False, None),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": "1"}, None, True, None),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": "true"}, None, False, "'true', not '1'"),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": "yes"}, None, False, "'yes', not '1'"),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": "1 "}, None, False, "'1 ', not '1'"),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": ""}, None, False, "'', not '1'"),
        ({}, True, True, None),
        ({"AX_CODE_TRUST_PROJECT_CONFIG": "1"}, False, False, None),
    ],
)
def test_trust_is_exactly_1_or_the_runner_flag(
    environ: dict[str, str], flag: bool | None, on: bool, notice: str | None
) -> None:
    switch = trust_switch(environ, flag)
    assert switch.on is on
    assert (switch.notice is None) if notice is None else (notice in (switch.notice or ""))


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"AX_CODE_HOOKS_FULL_ENV": "1"}, True),
        ({"AX_CODE_HOOKS_FULL_ENV": "true"}, False),
        ({"HOOKRUNNER_FULL_ENV": "1"}, True),
        ({"AX_CODE_HOOKS_FULL_ENV": "0", "HOOKRUNNER_FULL_ENV": "1"}, True),
    ],
)
def test_full_environment_switch(environ: dict[str, str], on: bool) -> None:
    assert full_env_switch(environ).on is on


def test_untrusted_project_file_is_not_read(ax: AxEnv) -> None:
    ax.hooks("{ not even json")
    config = load_ax_config(ax.workspace, trusted=False)
    assert (config.entries, config.problems, config.files) == ((), (), ())
    assert config.notices == (
        f"{ax.hooks_file}: project hooks are off: after reviewing them, start the runner with "
        "AX_CODE_TRUST_PROJECT_CONFIG=1 or --trust-project-hooks",
    )


def test_trusted_project_file_loads_packs_first_then_hooks(ax: AxEnv) -> None:
    ax.hooks({"hooks": [HOOK, cc("UserPromptSubmit", "check")], "packs": ["log-bash-commands"]})
    config = load_ax_config(ax.workspace, trusted=True)
    assert config.problems == ()
    assert [(e.source, e.event, e.protocol, e.pack) for e in config.entries] == [
        ("log-bash-commands", AxEvent.PRE_TOOL_USE, Protocol.LEGACY, "log-bash-commands"),
        ("hooks[0]", AxEvent.PRE_TOOL_USE, Protocol.LEGACY, ""),
        ("hooks[1]", AxEvent.USER_PROMPT_SUBMIT, Protocol.CLAUDE_CODE, ""),
    ]
    assert config.entries[1].where == f"{ax.hooks_file} $.hooks[0]"


def test_every_pack_loads_with_its_hooks(ax: AxEnv) -> None:
    ax.hooks({"packs": list(PACKS)})
    config = load_ax_config(ax.workspace, trusted=True)
    assert config.problems == ()
    assert [(e.pack, e.event.value, e.block_on_failure) for e in config.entries] == [
        ("format-after-edit", "PostToolUse", False),
        ("block-force-push", "PreToolUse", True),
        ("require-tests-on-stop", "PostToolUse", False),
        ("require-tests-on-stop", "Stop", False),
        ("protect-env-files", "PreToolUse", True),
        ("log-bash-commands", "PreToolUse", False),
    ]
    by_pack = {e.pack: e for e in config.entries if e.event is AxEvent.PRE_TOOL_USE}
    for tool in ("bash", "code_execution", "Bash"):
        assert by_pack["block-force-push"].matcher.matches(tool)
    for tool in ("read", "read_file", "write", "write_file", "edit", "bash", "code_execution"):
        assert by_pack["protect-env-files"].matcher.matches(tool)
    assert not by_pack["block-force-push"].matcher.matches("read")


PROBLEMS: list[tuple[str, Any, list[tuple[str, str]], int]] = [
    # (name, document, [(path, reason)], entries loaded)
    ("not an object", [], [("$", "the document must be an object, got an array")], 0),
    ("unknown top-level key", {"hook": []}, [("$.hook", "unknown key in the document (ignored)")], 0),
    ("packs not an array", {"packs": "block-force-push"},
     [("$.packs", "must be an array of pack names, got a string")], 0),
    ("unknown pack", {"packs": ["no-such-pack", 3]},
     [("$.packs[0]", 'unknown pack "no-such-pack"; known: ' + ", ".join(PACKS) + "; skipped"),
      ("$.packs[1]", "unknown pack 3; known: " + ", ".join(PACKS) + "; skipped")], 0),
    ("pack twice", {"packs": ["log-bash-commands", "log-bash-commands"]},
     [("$.packs[1]", "pack 'log-bash-commands' listed twice; loaded once")], 1),
    ("hooks not an array", {"hooks": {}}, [("$.hooks", "must be an array of entries, got an object")], 0),
    ("entry not an object", {"hooks": ["echo"]},
     [("$.hooks[0]", "an entry must be an object, got a string; entry skipped")], 0),
    ("missing event", {"hooks": [{"command": "x"}]},
     [("$.hooks[0].event", "must be one of PreToolUse, PostToolUse, PostToolUseFailure, Stop, "
       "UserPromptSubmit, PreCompact, SubagentStop, SessionStart, SessionEnd, PostCompact, "
       "Interrupt, got missing; entry skipped")], 0),
    ("wrong case event", {"hooks": [entry("pretooluse", "x")]},
     [("$.hooks[0].event", "must be one of PreToolUse, PostToolUse, PostToolUseFailure, Stop, "
       "UserPromptSubmit, PreCompact, SubagentStop, SessionStart, SessionEnd, PostCompact, "
       'Interrupt, got "pretooluse"; entry skipped')], 0),
    ("empty command", {"hooks": [entry("Stop", " ")]},
     [("$.hooks[0].command", "must be a non-empty string; entry skipped")], 0),
    ("blockOnFailure not a boolean", {"hooks": [entry("PreToolUse", "x", blockOnFailure="true")]},
     [("$.hooks[0].blockOnFailure", "must be a boolean, got a string; entry skipped")], 0),
    ("unknown protocol", {"hooks": [entry("PreToolUse", "x", protocol="claude")]},
     [("$.hooks[0].protocol", 'must be "claude-code", got "claude"; entry skipped')], 0),
    ("null protocol", {"hooks": [entry("PreToolUse", "x", protocol=None)]},
     [("$.hooks[0].protocol", 'must be "claude-code", got null; entry skipped')], 0),
    ("bad timeout", {"hooks": [entry("PreToolUse", "x", timeout=1.5)]},
     [("$.hooks[0].timeout", "must be a positive integer of seconds; entry skipped")], 0),
    ("repeated key in an entry", '{"hooks": [{"event": "Stop", "command": "a", "command": "b"}]}',
     [("$.hooks[0].command", "key given twice; entry skipped")], 0),
    ("repeated hooks key", '{"hooks": [{"event": "Stop", "command": "a"}], "hooks": [{"event": "Stop", "command": "b"}]}',
     [("$.hooks", "key given twice; both lists are loaded, in order")], 2),
    ("unknown entry key", {"hooks": [entry("Stop", "x", comment="hi")]},
     [("$.hooks[0].comment", "unknown key in an entry (ignored); did you mean 'command'?")], 1),
    ("blockOnFailure on an event that cannot block", {"hooks": [entry("Stop", "x", blockOnFailure=True)]},
     [("$.hooks[0].blockOnFailure", "has no effect: Stop cannot block (ignored)")], 1),
    ("blockOnFailure with claude-code fails closed (issue 20)",
     {"hooks": [cc("PreToolUse", "x", blockOnFailure=True)]}, [], 1),
    ("matcher on an event without a tool", {"hooks": [entry("Stop", "x", matcher="bash")]},
     [("$.hooks[0].matcher", 'Stop has no tool, so only "" or "*" match it; this entry never runs')], 1),
    ("matcher that matches no tool name", {"hooks": [entry("PreToolUse", "x", matcher="Bash(npm test)")]},
     [("$.hooks[0].matcher", "regular expression 'Bash(npm test)' can match no tool name (tool "
       "names are letters, digits, _ - . :); the entry never runs")], 1),
    ("matcher that is not RE2", {"hooks": [entry("PreToolUse", "x", matcher="*_file")]},
     [("$.hooks[0].matcher", "not a valid RE2 pattern (no argument for repetition operator: *); "
       "it matches no tool")], 1),
]  # fmt: skip


@pytest.mark.parametrize(("name", "document", "problems", "loaded"), PROBLEMS)
def test_problems_name_their_json_path(
    ax: AxEnv, name: str, document: Any, problems: list[tuple[str, str]], loaded: int
) -> None:
    path = ax.hooks(document)
    config = load_ax_config(ax.workspace, trusted=True)
    assert [str(p) for p in config.problems] == [f"{path}: {p}: {r}" for p, r in problems]
    assert len(config.entries) == loaded


@pytest.mark.parametrize(
    "key", ["AX_CODE_HOOKS_FULL_ENV", "fullEnv", "full-env", "env", "AX_CODE_TRUST_PROJECT_CONFIG"]
)
def test_a_file_cannot_ask_for_the_full_environment_or_trust(ax: AxEnv, key: str) -> None:
    hooks = [{**HOOK, key: "1"}]
    path = ax.hooks({key: True, "hooks": hooks})
    config = load_ax_config(ax.workspace, trusted=True)
    reason = (
        "a hooks file cannot choose the environment or trust; only the runner's own environment "
        "and flags can (ignored)"
    )
    assert [str(p) for p in config.problems] == [
        f"{path}: {'$.' + key if key.isidentifier() else '$[' + json.dumps(key) + ']'}: {reason}",
        f"{path}: {'$.hooks[0].' + key if key.isidentifier() else '$.hooks[0][' + json.dumps(key) + ']'}: {reason}",
    ]
    assert len(config.entries) == 1


def test_operator_file_loads_first_and_once(ax: AxEnv, tmp_path: Path) -> None:
    operator = tmp_path / "operator.json"
    operator.write_text(json.dumps({"hooks": [entry("Stop", "op")]}))
    ax.hooks({"hooks": [entry("Stop", "project")]})
    config = load_ax_config(ax.workspace, trusted=True, operator_config=operator)
    assert [e.command for e in config.entries] == ["op", "project"]
    untrusted = load_ax_config(ax.workspace, trusted=False, operator_config=operator)
    assert [e.command for e in untrusted.entries] == ["op"]
    same = load_ax_config(ax.workspace, trusted=True, operator_config=ax.hooks_file)
    assert [e.command for e in same.entries] == ["project"]
    missing = load_ax_config(ax.workspace, trusted=False, operator_config=tmp_path / "nope.json")
    assert [p.message for p in missing.problems] == ["file does not exist"]


@pytest.mark.parametrize(
    ("pattern", "tool", "matches"),
    [
        ("", "bash", True),
        ("*", "bash", True),
        ("", "", True),
        ("*", "", True),
        ("bash", "bash", True),
        ("bash", "Bash", True),  # one tool, two vocabularies (AX Code, Claude Code)
        ("Bash", "bash", True),
        ("Bash", "BashOutput", False),
        ("bash", "bash2", False),
        ("edit|write", "write", True),
        (" edit | write ", "edit", True),
        ("mcp_*", "mcp_github_search", True),
        ("mcp_*", "mcp", False),
        ("bash", "", False),
        ("Edit|Wr.*", "Write", True),  # a regular expression, as Claude Code reads it
        (".*", "bash", True),
        ("mcp__.*", "mcp__github__create_issue", True),
        ("mcp__.*", "bash", False),
        ("Notebook.*", "NotebookEdit", True),
        ("Bash(npm test)", "Bash", False),
    ],
)
def test_ax_matchers(pattern: str, tool: str, matches: bool) -> None:
    assert compile_ax_matcher(pattern).matches(tool) is matches


SECRET = "sk-live-4e1b9d7c-never-print-me"


@pytest.mark.parametrize(
    "document",
    [
        {"hooks": [{"event": "Stop", "command": f"curl -H 'Authorization: {SECRET}' x\0"}]},
        {"hooks": [{"event": "Stop", "command": [SECRET]}]},
        {"hooks": [{"event": "Stop", "command": "x", "matcher": SECRET * 30}]},
        {"hooks": [{"event": "Stop", "command": "x", "timeout": SECRET}]},
        {"hooks": [{"event": "Stop", "command": "x", "blockOnFailure": SECRET}]},
        {"hooks": [{"event": "Stop", "command": "x", "pack": [SECRET]}]},
        {"hooks": [{"event": "Stop", "command": "x", "env": {"TOKEN": SECRET}}]},
        {"hooks": [{"command": f"run --token {SECRET}"}]},
        {"token": SECRET, "hooks": SECRET},
    ],
    ids=["nul", "list", "long matcher", "timeout", "flag", "pack", "env", "no event", "top"],
)
def test_a_refused_value_is_never_printed(ax: AxEnv, document: Any) -> None:
    path = ax.hooks(document)
    config = load_ax_config(ax.workspace, trusted=True)
    problems = [str(p) for p in config.problems]
    assert problems != []
    assert all(p.startswith(f"{path}: $") for p in problems)
    assert [p for p in problems if SECRET[3:20] in p] == []
