"""Open payloads in the hooks.json dialect: what the runner does not read reaches hooks unchanged.

Issue 13: the runner used to rebuild the payload from ``tool_call.name``,
``tool_call.args`` and ``environment_id`` only, so a hook could not read the
call id (or anything else) an agent runtime sends. Needed fields are still
checked, with exit status 2 and the documented message.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from sandbox_egress.hookrunner.errors import PayloadError
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ, command, rule

DUMP = """import json, sys
with open(sys.argv[1], "a") as out:
    out.write(sys.stdin.read() + "\\n")
"""


def dumping(env: Env, event: str = "pre_tool_execution") -> None:
    line = f"{env.script('dump.py', DUMP)} {env.root / 'seen.jsonl'}"
    env.hooks({"g": {event: [rule("", command(line))]}})


def seen(env: Env) -> list[Any]:
    return [json.loads(line) for line in (env.root / "seen.jsonl").read_text().splitlines()]


def run(env: Env, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOOKRUNNER, *args, "--workspace", str(env.workspace), "--system-config",
         str(env.system_config)],
        input=stdin,
        capture_output=True,
        text=True,
        env=base_environ(),
        timeout=30,
    )  # fmt: skip


PRE = {
    "tool_call": {
        "name": "code_execution",
        "args": {"code": "ls", "language": "bash"},
        "id": "call_01HZX",
        "index": 3,
    },
    "environment_id": "env_xyz789",
    "session_id": "ses_42",
    "trace": {"parent": "span_7", "sampled": True},
}


def test_pre_hooks_read_every_field_the_runtime_sent(env: Env) -> None:
    dumping(env)
    done = run(env, "run", "pre_tool_execution", stdin=json.dumps(PRE))
    assert (done.returncode, done.stdout) == (0, '{"decision": "allow"}\n')
    assert seen(env) == [PRE]


def test_post_hooks_read_every_field_and_the_error_rule_still_holds(env: Env) -> None:
    dumping(env, "post_tool_execution")
    with_error = {**PRE, "error": "ls: cannot access 'x'"}
    # An empty error is no error: no key (docs/hooks.md#events-and-payloads).
    without = {**PRE, "error": ""}
    for payload in (with_error, without):
        done = run(env, "run", "post_tool_execution", stdin=json.dumps(payload))
        assert done.returncode == 0
    assert seen(env) == [with_error, PRE]


def test_session_requests_pass_their_fields_but_not_the_request_event(env: Env) -> None:
    dumping(env)
    request = {"event": "pre_tool_execution", **PRE}
    done = run(env, "session", stdin=json.dumps(request) + "\n")
    assert (done.returncode, done.stdout) == (0, '{"decision": "allow"}\n')
    assert seen(env) == [PRE]


def test_a_needed_field_of_the_wrong_type_is_still_a_clear_error(env: Env) -> None:
    dumping(env)
    cases = [
        ({**PRE, "tool_call": {**PRE["tool_call"], "name": 5}},
         '"tool_call.name" must be a non-empty string'),
        ({**PRE, "tool_call": {**PRE["tool_call"], "args": "ls"}},
         '"tool_call.args" must be an object'),
        ({**PRE, "environment_id": ["env"]}, '"environment_id" must be a string'),
    ]  # fmt: skip
    for payload, message in cases:
        done = run(env, "run", "pre_tool_execution", stdin=json.dumps(payload))
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == f"hookrunner: error: {message}\n"
    assert not (env.root / "seen.jsonl").exists()


def test_the_python_api_passes_the_runtimes_fields(env: Env) -> None:
    dumping(env, "post_tool_execution")
    session = env.session()
    session.post("read_file", {"path": "a"}, fields={"call_id": "c1", "turn": 4})
    assert seen(env) == [
        {
            "call_id": "c1",
            "turn": 4,
            "tool_call": {"name": "read_file", "args": {"path": "a"}},
            "environment_id": "env_test",
        }
    ]
    with pytest.raises(PayloadError, match="fields cannot set environment_id: the runner"):
        session.pre("read_file", {}, fields={"environment_id": "forged"})
    with pytest.raises(PayloadError, match="the fields are not JSON"):
        session.pre("read_file", {}, fields={"at": object()})
