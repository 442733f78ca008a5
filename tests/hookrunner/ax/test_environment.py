"""What a real hook process receives: HOOK_* variables, stdin, and the sanitised environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandbox_egress.hookrunner.enforce.envsan import HOOK_ARGS_JSON_LIMIT
from tests.hookrunner.ax.conftest import AxEnv, entry

DUMP = """import json, os, sys
data = sys.stdin.buffer.read()
json.dump({"stdin": data.decode("utf-8"), "env": dict(os.environ), "cwd": os.getcwd()},
          open(sys.argv[1], "w"))
"""
GH = "ghp_" + "a" * 36


def dumped(ax: AxEnv, name: str = "seen.json") -> dict[str, Any]:
    return json.loads((ax.root / name).read_text())


def dump_hook(ax: AxEnv, event: str, name: str = "seen.json", **fields: Any) -> dict[str, Any]:
    return entry(event, f"{ax.script('dump.py', DUMP)} {ax.root / name}", **fields)


def test_hook_variables_and_stdin_of_a_legacy_entry(ax: AxEnv) -> None:
    ax.hooks({"hooks": [dump_hook(ax, "PreToolUse", matcher="bash")]})
    args = {"command": "echo héllo", "description": "greet"}
    ax.session(session_id="ses_42").fire("PreToolUse", {"tool": "bash", "args": args})
    seen = dumped(ax)
    env = seen["env"]
    compact = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    assert {k: v for k, v in env.items() if k.startswith("HOOK_")} == {
        "HOOK_EVENT": "PreToolUse",
        "HOOK_TOOL": "bash",
        "HOOK_SESSION_ID": "ses_42",
        "HOOK_ARGS_JSON": compact,
        "HOOK_ARGS_STDIN": "1",
        "HOOK_PACK": "",
    }
    assert seen["stdin"] == compact  # the full arguments, always on stdin
    assert seen["cwd"] == env["PWD"] == str(ax.workspace.resolve())
    assert "CLAUDE_PROJECT_DIR" not in env


def test_claude_code_entries_get_the_claude_code_envelope(ax: AxEnv) -> None:
    hook = dump_hook(ax, "PostToolUse", protocol="claude-code")
    ax.hooks({"hooks": [hook]})
    ax.session(session_id="ses_7").fire(
        "PostToolUse", {"tool": "edit", "args": {"filePath": "a.py"}, "output": "done"}
    )
    seen = dumped(ax)
    document = json.loads(seen["stdin"])
    timestamp = document.pop("timestamp")
    assert document == {
        "session_id": "ses_7",
        "hook_event_name": "PostToolUse",
        "cwd": str(ax.workspace.resolve()),
        "tool_name": "Edit",  # Claude Code's names for AX Code's edit and filePath
        "tool_input": {"file_path": "a.py"},
        "tool_response": "done",
    }
    assert timestamp.endswith("Z")
    assert seen["env"]["CLAUDE_PROJECT_DIR"] == str(ax.workspace.resolve())
    assert seen["env"]["HOOK_ARGS_JSON"] == '{"filePath":"a.py"}'


@pytest.mark.parametrize(
    ("char", "extra", "kept"),
    [
        ("a", 0, True),  # exactly 32 KiB of UTF-8
        ("a", 1, False),  # one byte over
        ("é", 0, True),  # two-byte characters: bytes count, not characters
        ("é", 2, False),
    ],
)
def test_hook_args_json_is_empty_above_32_kib(ax: AxEnv, char: str, extra: int, kept: bool) -> None:
    overhead = len('{"x":""}')
    count = (HOOK_ARGS_JSON_LIMIT - overhead) // len(char.encode())
    args = {"x": char * count + "a" * extra}
    size = len(json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode())
    assert size == HOOK_ARGS_JSON_LIMIT + extra
    ax.hooks({"hooks": [dump_hook(ax, "PreToolUse")]})
    ax.session().fire("PreToolUse", {"tool": "write", "args": args})
    seen = dumped(ax)
    compact = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    assert seen["env"]["HOOK_ARGS_JSON"] == (compact if kept else "")
    assert seen["env"]["HOOK_ARGS_STDIN"] == "1"
    assert seen["stdin"] == compact


SANITISED = {
    # name: value, by class
    "GITHUB_TOKEN": GH,  # secret-looking name
    "OPENAI_API_KEY": "sk-not-really",
    "DATABASE_URL": "postgres://app:hunter22@db:5432/app",  # URL carrying credentials
    "WEBHOOK": "https://hooks.example.com/x?token=abcdef",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",  # credential helper
    "GIT_ASKPASS": "/usr/bin/askpass",
    "NODE_OPTIONS": "--require /tmp/evil.js",  # process injection
    "LD_PRELOAD": "/tmp/evil.so",
    "BASH_ENV": "/tmp/evil.sh",
    "HOOK_EVENT": "forged",  # inherited protocol variable
    "HOOK_PACK": "forged",
}
KEPT = {"LANG": "C.UTF-8", "HTTPS_PROXY": "http://127.0.0.1:8080", "TERM": "xterm"}


def _environ(ax: AxEnv, **extra: str) -> dict[str, str]:
    return ax.environ(**SANITISED, **KEPT, **extra)


def test_each_sanitised_class_is_removed_and_hook_variables_added_after(ax: AxEnv) -> None:
    ax.hooks({"hooks": [dump_hook(ax, "Stop")]})
    ax.session(environ=_environ(ax)).fire("Stop", {})
    env = dumped(ax)["env"]
    for name in SANITISED:
        if not name.startswith("HOOK_"):
            assert name not in env, name
    assert (env["HOOK_EVENT"], env["HOOK_PACK"], env["HOOK_TOOL"]) == ("Stop", "", "")
    for name, value in KEPT.items():
        assert env[name] == value
    assert env["PATH"]
    assert env["HOME"]


@pytest.mark.parametrize(
    ("extra", "kwargs", "full"),
    [
        ({"AX_CODE_HOOKS_FULL_ENV": "1"}, {}, True),
        ({"HOOKRUNNER_FULL_ENV": "1"}, {}, True),
        ({}, {"full_env": True}, True),
        ({"AX_CODE_HOOKS_FULL_ENV": "true"}, {}, False),
        ({"AX_CODE_HOOKS_FULL_ENV": "yes"}, {}, False),
    ],
)
def test_full_environment_only_from_the_runner(
    ax: AxEnv, extra: dict[str, str], kwargs: dict[str, Any], full: bool
) -> None:
    ax.hooks({"hooks": [dump_hook(ax, "Stop")]})
    ax.session(environ=_environ(ax, **extra), **kwargs).fire("Stop", {})
    env = dumped(ax)["env"]
    assert ("GITHUB_TOKEN" in env, "NODE_OPTIONS" in env, "SSH_AUTH_SOCK" in env) == (full,) * 3
    assert env["HOOK_EVENT"] == "Stop"  # inherited HOOK_* never pass, even with the full env


def test_a_file_that_asks_for_the_full_environment_does_not_get_it(ax: AxEnv) -> None:
    hook = dump_hook(ax, "Stop")
    hook.update({"env": {"AX_CODE_HOOKS_FULL_ENV": "1"}, "fullEnv": True})
    ax.hooks({"AX_CODE_HOOKS_FULL_ENV": "1", "AX_CODE_TRUST_PROJECT_CONFIG": "1", "hooks": [hook]})
    session = ax.session(environ=_environ(ax))
    assert session.full_env is False
    session.fire("Stop", {})
    env = dumped(ax)["env"]
    assert "GITHUB_TOKEN" not in env
    assert "DATABASE_URL" not in env
    assert len([w for w in ax.warnings() if "cannot choose the environment" in w["cause"]]) == 4


def test_secrets_never_reach_warning_lines(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("Stop", f"echo 'leaking {GH}' >&2; exit 1")]})
    ax.session(environ=_environ(ax)).fire("Stop", {})
    [warning] = ax.warnings()
    assert warning["cause"] == "exited with status 1 (stderr: 'leaking [redacted]')"
    assert GH not in ax.stream.getvalue()


def test_hook_pack_is_set_for_entries_that_declare_one(ax: AxEnv) -> None:
    ax.hooks({"hooks": [dump_hook(ax, "Stop", pack="my-pack")]})
    ax.session().fire("Stop", {})
    assert dumped(ax)["env"]["HOOK_PACK"] == "my-pack"
