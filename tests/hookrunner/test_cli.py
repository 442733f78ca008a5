"""The real ``hookrunner`` console script: validate, run, exec, session."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ, command, pre_group, rule

GATE = """#!/usr/bin/env python3
import sys, json
data = json.load(sys.stdin)
cmd = str(data.get("tool_call", {}).get("args", {}))
if "rm -rf" in cmd:
    print(json.dumps({"decision": "deny", "reason": "Destructive command blocked by security gate."}))
else:
    print(json.dumps({"decision": "allow"}))
"""

PRIVACY = """#!/usr/bin/env python3
import sys, json
data = json.load(sys.stdin)
path = str(data.get("tool_call", {}).get("args", {}).get("path", ""))

if "/private/" in path:
    resp = {
        "decision": "deny",
        "reason": "Access to confidential `/private/` records is blocked by PII compliance policy. Query approved `/public/` summary tables instead."
    }
else:
    resp = {"decision": "allow"}

print(json.dumps(resp))
"""
PRIVACY_REASON = (
    "Access to confidential `/private/` records is blocked by PII compliance policy. "
    "Query approved `/public/` summary tables instead."
)


def cli(
    env: Env, *args: str, stdin: Any = None, **environ: str
) -> subprocess.CompletedProcess[str]:
    data = stdin if isinstance(stdin, str) or stdin is None else json.dumps(stdin)
    return subprocess.run(
        [
            HOOKRUNNER,
            *args,
            "--workspace",
            str(env.workspace),
            "--system-config",
            str(env.system_config),
        ],
        input=data or "",
        capture_output=True,
        text=True,
        env=base_environ(**environ),
        timeout=30,
    )


def seed(env: Env) -> None:
    env.hooks(
        {
            "security-gate": {
                "enabled": True,
                "pre_tool_execution": [
                    rule("code_execution", command(env.script("gate.py", GATE), timeout=10))
                ],
            },
            "privacy-gate": pre_group(
                rule("read_file", command(env.script("check_privacy.py", PRIVACY), timeout=5))
            ),
        }
    )
    (env.workspace / "private").mkdir()
    (env.workspace / "public").mkdir()
    (env.workspace / "private" / "employees.json").write_text(
        '{"employees": [{"id": 1, "salary": 150000, "ssn": "000-00-0000"}]}'
    )
    (env.workspace / "public" / "summary.json").write_text(
        '{"department": "Engineering", "team_size": 42, "status": "active"}'
    )


@pytest.mark.privileged
def test_seed_security_gate_through_exec(env: Env) -> None:
    seed(env)
    forbidden = env.root / "forbidden"
    forbidden.mkdir()
    code = {"code": f"rm -rf {forbidden}", "language": "bash"}
    denied = cli(env, "exec", "code_execution", stdin=code)
    assert (denied.returncode, json.loads(denied.stdout)) == (
        1,
        {
            "status": "denied",
            "output": "",
            "reason": "Destructive command blocked by security gate.",
        },
    )
    assert forbidden.is_dir()  # the tool did not run
    allowed = cli(env, "exec", "code_execution", stdin={"code": "echo safe", "language": "bash"})
    assert (allowed.returncode, json.loads(allowed.stdout)) == (
        0,
        {"status": "ok", "output": "safe\n"},
    )


def test_seed_privacy_gate_deny_then_public_read(env: Env) -> None:
    seed(env)
    private = str(env.workspace / "private" / "employees.json")
    denied = cli(env, "exec", "read_file", stdin={"path": private})
    assert (denied.returncode, json.loads(denied.stdout)) == (
        1,
        {"status": "denied", "output": "", "reason": PRIVACY_REASON},
    )
    public = str(env.workspace / "public" / "summary.json")
    allowed = cli(env, "exec", "read_file", stdin={"path": public})
    assert (allowed.returncode, json.loads(allowed.stdout)) == (
        0,
        {
            "status": "ok",
            "output": '{"department": "Engineering", "team_size": 42, "status": "active"}',
        },
    )


def test_run_pre_prints_the_decision_and_exits_by_it(env: Env) -> None:
    seed(env)
    payload = {
        "tool_call": {
            "name": "code_execution",
            "args": {"code": "rm -rf /tmp/x", "language": "bash"},
        },
        "environment_id": "env_xyz789",
    }
    denied = cli(env, "run", "pre_tool_execution", stdin=payload)
    assert (denied.returncode, json.loads(denied.stdout)) == (
        1,
        {
            "decision": "deny",
            "reason": "Destructive command blocked by security gate.",
            "group": "security-gate",
        },
    )
    payload["tool_call"]["args"]["code"] = "ls"  # type: ignore[index]
    allowed = cli(env, "run", "pre_tool_execution", stdin=payload)
    assert (allowed.returncode, json.loads(allowed.stdout)) == (0, {"decision": "allow"})


def test_run_post_always_allows_and_passes_error(env: Env) -> None:
    log = env.root / "post.json"
    env.hooks(
        {
            "audit": {
                "post_tool_execution": [
                    rule("*", command(f"""cat > {log}; echo '{{"decision": "deny"}}'; exit 1"""))
                ]
            }
        }
    )
    payload = {
        "tool_call": {"name": "read_file", "args": {"path": "x"}},
        "environment_id": "e1",
        "error": "read_file: x: No such file or directory",
    }
    result = cli(env, "run", "post_tool_execution", stdin=payload)
    assert (result.returncode, json.loads(result.stdout)) == (0, {"decision": "allow"})
    assert json.loads(log.read_text()) == payload
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert "kind=post_failure" in warning
    assert "outcome=exit_nonzero" in warning


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("run", "pre_tool_execution"), "not json", "hookrunner: error: stdin is not JSON"),
        (
            ("run", "pre_tool_execution"),
            {"tool_call": {"args": {}}},
            'hookrunner: error: "tool_call.name" must be a non-empty string',
        ),
        (
            ("run", "pre_tool_execution"),
            {"tool_call": {"name": "x", "args": []}},
            'hookrunner: error: "tool_call.args" must be an object',
        ),
        (
            ("exec", "read_file"),
            "[]",
            "hookrunner: error: the tool arguments on stdin must be a JSON object",
        ),
        (("exec", "rm_everything"), "{}", "invalid choice: 'rm_everything'"),
        (("run", "on_stop"), "{}", "invalid choice: 'on_stop'"),
        (
            ("session", "--metrics", "nope"),
            "",
            "hookrunner: error: --metrics: expected HOST:PORT, got 'nope'",
        ),
    ],
)
def test_usage_and_payload_errors_exit_2(
    env: Env, args: tuple[str, ...], stdin: Any, message: str
) -> None:
    result = cli(env, *args, stdin=stdin)
    assert (result.returncode, result.stdout) == (2, "")
    assert message in result.stderr


@pytest.mark.privileged
def test_exec_tool_failure_and_escape(env: Env) -> None:
    failed = cli(
        env, "exec", "code_execution", stdin={"code": "echo o; exit 5", "language": "bash"}
    )
    assert (failed.returncode, json.loads(failed.stdout)) == (
        1,
        {"status": "error", "output": "o\n", "error": "exited with status 5"},
    )
    escape = cli(env, "exec", "read_file", stdin={"path": "../system/hooks.json"})
    assert (escape.returncode, json.loads(escape.stdout)) == (
        1,
        {
            "status": "error",
            "output": "",
            "error": "read_file: ../system/hooks.json: path is outside the workspace",
        },
    )


def test_exec_environment_id_and_full_env_switch(env: Env) -> None:
    seen = env.root / "seen.json"
    script = env.script(
        "see.py",
        "import json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps([json.load(sys.stdin), "
        "os.environ.get('API_TOKEN')]))\n",
    )
    env.hooks({"g": pre_group(rule("*", command(script)))})
    cli(env, "exec", "list_files", "--environment-id", "env_42", stdin={}, API_TOKEN="tok-123456")
    assert json.loads(seen.read_text()) == [
        {"tool_call": {"name": "list_files", "args": {}}, "environment_id": "env_42"},
        None,
    ]
    cli(env, "exec", "list_files", stdin={}, API_TOKEN="tok-123456", HOOKRUNNER_FULL_ENV="1")
    assert json.loads(seen.read_text())[1] == "tok-123456"
    cli(env, "exec", "list_files", "--full-env", stdin={}, API_TOKEN="tok-123456")
    assert json.loads(seen.read_text())[1] == "tok-123456"


def test_validate_valid_and_invalid(env: Env) -> None:
    env.hooks({"g": pre_group(rule("*", command("true")))})
    ok = cli(env, "validate")
    hooks = env.workspace / ".agents" / "hooks.json"
    assert (ok.returncode, ok.stdout) == (0, "")
    assert ok.stderr == f"hookrunner: valid ({env.system_config}, {hooks})\n"
    env.hooks(
        {
            "g": pre_group(rule("*_file", command("true", timeout=0)), enabled="yes"),
            "h": {"pre_tool_execution": [rule("*", {"type": "http", "url": "http://x.example"})]},
        }
    )
    env.hooks("{,", system=True)
    bad = cli(env, "validate")
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [
        f"{env.system_config}: line 1, column 2: not valid JSON: Expecting property name "
        "enclosed in double quotes",
        f"{hooks}: $.g.enabled: must be true or false, got a string; group skipped",
        f'{hooks}: $.g.pre_tool_execution[0].matcher: "*_file" is not a valid RE2 pattern '
        "(no argument for repetition operator: *); matches nothing",
        f"{hooks}: $.g.pre_tool_execution[0].hooks[0].timeout: must be a positive integer of "
        "seconds, got 0; handler skipped",
        f"{hooks}: $.h.pre_tool_execution[0].hooks[0].url: must be an https:// URL; handler "
        "skipped",
    ]


def test_validate_missing_workspace_exits_2(env: Env) -> None:
    result = subprocess.run(
        [HOOKRUNNER, "validate", "--workspace", str(env.root / "nope")],
        capture_output=True,
        text=True,
        env=base_environ(),
        timeout=30,
    )
    assert (result.returncode, result.stdout) == (2, "")


@contextlib.contextmanager
def session_process(env: Env, *extra: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [
            HOOKRUNNER,
            "session",
            "--workspace",
            str(env.workspace),
            "--system-config",
            str(env.system_config),
            *extra,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_environ(),
        bufsize=1,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def ask(process: subprocess.Popen[str], request: dict[str, Any]) -> dict[str, Any]:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def test_session_keeps_its_snapshot_and_serves_metrics(env: Env) -> None:
    hooks = env.hooks(
        {
            "gate": pre_group(
                rule("read_file", command("""echo '{"decision": "deny", "reason": "no"}'"""))
            )
        }
    )
    (env.workspace / "a.txt").write_text("A")
    with session_process(env, "--metrics", "127.0.0.1:0") as process:
        assert process.stderr is not None
        address = ""
        while not address:  # readiness: the line announcing the metrics address
            line = process.stderr.readline()
            assert line, "session exited before it was ready"
            if line.startswith("hookrunner: metrics on "):
                address = line.split("metrics on ", 1)[1].strip()
        call = {"tool_call": {"name": "read_file", "args": {"path": "a.txt"}}}
        assert ask(process, {"event": "pre_tool_execution", **call}) == {
            "decision": "deny",
            "reason": "no",
            "group": "gate",
        }
        hooks.write_text("{}")  # the agent edits the file mid-session: nothing changes
        assert ask(process, {"exec": "read_file", "args": {"path": "a.txt"}}) == {
            "status": "denied",
            "output": "",
            "reason": "no",
        }
        assert ask(process, {"exec": "list_files", "args": {}}) == {
            "status": "ok",
            "output": ".agents/\na.txt",
        }
        assert ask(process, {"event": "nope"}) == {
            "status": "invalid",
            "error": '"event" must be pre_tool_execution or post_tool_execution',
        }
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(address, timeout=5) as response:
            text = response.read().decode()
        samples = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("hook_runs_total{", "hook_decisions_total{"))
        }
        key = 'hook_runs_total{event="pre_tool_execution",outcome="deny",type="command"}'
        assert samples[key] == 2.0
        assert samples['hook_decisions_total{decision="deny"}'] == 2.0
        assert samples['hook_decisions_total{decision="allow"}'] == 1.0
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=10) == 0
