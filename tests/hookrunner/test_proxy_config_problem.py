"""An unusable HTTPS_PROXY is one configuration problem per session, not a network error per call.

Each case opens a session (the Python API, ``hookrunner run``/``exec``, a
``hookrunner session`` process) whose http handlers would go through a proxy
the runner cannot use (``socks5://``, an unparseable URL). The problem is
reported once, as a ``kind=config`` warning naming the variable and counted in
``hook_config_problems_total{kind="https_proxy"}``; every http handler run then
fails open with its own outcome, ``proxy_unusable``. The proxy's credentials
never appear.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from sandbox_egress.hookrunner.outcome import Outcome
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ, rule, warnings_in
from tests.hookrunner.net_support import closed_port

SOCKS = "socks5://agent:s3cret-pass@127.0.0.1:1080"
PROXY_CAUSE = "HTTPS_PROXY scheme 'socks5' is not supported (use http)"
RUN_CAUSE = f"{PROXY_CAUSE}; reported once as a configuration problem"


def two_http_groups(port: int) -> dict[str, Any]:
    url = f"https://127.0.0.1:{port}/gate"
    handler = {"type": "http", "url": url}
    return {
        "a": {"pre_tool_execution": [rule("*", handler, handler)]},
        "b": {
            "pre_tool_execution": [rule("read_file", handler)],
            "post_tool_execution": [rule("*", handler)],
        },
    }


def config_warnings(text: str) -> list[dict[str, str]]:
    return [w for w in warnings_in(text) if w["kind"] == "config"]


@pytest.mark.parametrize(
    ("variables", "variable", "cause"),
    [
        ({"HTTPS_PROXY": SOCKS}, "HTTPS_PROXY", PROXY_CAUSE),
        (
            {
                "https_proxy": "http://agent:s3cret-pass@127.0.0.1:99999",
                "HTTPS_PROXY": "http://p:1",
            },
            "https_proxy",
            "HTTPS_PROXY is not a valid URL",
        ),
        ({"HTTPS_PROXY": "http://:s3cret-pass@:8080"}, "HTTPS_PROXY", "HTTPS_PROXY has no host"),
    ],
)
def test_api_session_reports_once_and_runs_fail_open_apart(
    env: Env, variables: dict[str, str], variable: str, cause: str
) -> None:
    env.hooks(two_http_groups(closed_port()))
    session = env.session(environ=base_environ(**variables))
    [problem] = config_warnings(env.stream.getvalue())
    assert problem == {
        "level": "warning",
        "kind": "config",
        "variable": variable,
        "cause": f"{cause}; http handlers that need it fail open (proxy_unusable)",
    }
    assert env.metrics.value("hook_config_problems_total", kind="https_proxy") == 1
    decisions = [session.pre("read_file", {"path": "x"}) for _ in range(3)]
    post = session.post("read_file", {"path": "x"})
    assert [d.allowed for d in decisions] == [True, True, True]
    runs = [*(r for d in decisions for r in d.runs), *post]
    assert len(runs) == 10
    assert {(r.outcome, r.detail) for r in runs} == {
        (Outcome.PROXY_UNUSABLE, f"{cause}; reported once as a configuration problem")
    }
    assert len(config_warnings(env.stream.getvalue())) == 1
    assert env.metrics.value("hook_config_problems_total", kind="https_proxy") == 1
    assert env.runs("pre_tool_execution", "http", "proxy_unusable") == 9
    assert env.runs("post_tool_execution", "http", "proxy_unusable") == 1
    assert env.runs("pre_tool_execution", "http", "network_error") == 0
    assert "s3cret" not in env.stream.getvalue()


@pytest.mark.parametrize(
    ("hooks", "extra"),
    [
        ("http bypassed", {"NO_PROXY": "127.0.0.1"}),
        ("command only", {}),
    ],
)
def test_no_problem_when_no_http_handler_needs_the_proxy(
    env: Env, hooks: str, extra: dict[str, str]
) -> None:
    if hooks == "command only":
        env.hooks(
            {"a": {"pre_tool_execution": [rule("*", {"type": "command", "command": "true"})]}}
        )
    else:
        env.hooks(two_http_groups(closed_port()))
    env.session(environ=base_environ(HTTPS_PROXY=SOCKS, **extra))
    assert config_warnings(env.stream.getvalue()) == []
    assert env.metrics.value("hook_config_problems_total", kind="https_proxy") == 0


def test_hooks_file_problems_are_counted_by_kind(env: Env) -> None:
    env.hooks({"a": {"pre_tool_execution": [{"matcher": "*", "hooks": [{"type": "nope"}]}]}})
    env.session()
    assert env.metrics.value("hook_config_problems_total", kind="hooks_file") == 1
    assert env.metrics.value("hook_config_problems_total", kind="https_proxy") == 0


def _cli(env: Env, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HOOKRUNNER, *args, "--workspace", str(env.workspace)]
        + ["--system-config", str(env.system_config)],
        input=stdin,
        capture_output=True,
        text=True,
        env=base_environ(HTTPS_PROXY=SOCKS),
        timeout=60,
    )


def test_each_run_and_exec_invocation_reports_it_once(env: Env) -> None:
    env.hooks(two_http_groups(closed_port()))
    (env.workspace / "x").write_text("X")
    call = json.dumps({"tool_call": {"name": "read_file", "args": {"path": "x"}}})
    run = _cli(env, "run", "pre_tool_execution", stdin=call)
    exec_ = _cli(env, "exec", "read_file", stdin=json.dumps({"path": "x"}))
    for done in (run, exec_):
        [problem] = config_warnings(done.stderr)
        assert (problem["variable"], problem["cause"]) == (
            "HTTPS_PROXY",
            f"{PROXY_CAUSE}; http handlers that need it fail open (proxy_unusable)",
        )
        # (a 0700 test workspace also gets its one kind=workspace line: issue 20)
        handler_warnings = [w for w in warnings_in(done.stderr) if "outcome" in w]
        outcomes = [w["outcome"] for w in handler_warnings]
        assert set(outcomes) == {"proxy_unusable"}
        assert "s3cret" not in done.stderr
    assert (run.returncode, json.loads(run.stdout)) == (0, {"decision": "allow"})
    assert len([w for w in warnings_in(run.stderr) if w["kind"] == "fail_open"]) == 3
    assert (exec_.returncode, json.loads(exec_.stdout)) == (0, {"status": "ok", "output": "X"})


def test_a_session_process_reports_it_once_for_many_requests(env: Env) -> None:
    env.hooks(two_http_groups(closed_port()))
    request = {"event": "pre_tool_execution", "tool_call": {"name": "read_file", "args": {}}}
    done = _cli(env, "session", stdin=(json.dumps(request) + "\n") * 4)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert (done.returncode, answers) == (0, [{"decision": "allow"}] * 4)
    assert len(config_warnings(done.stderr)) == 1
    assert len([w for w in warnings_in(done.stderr) if w["kind"] == "fail_open"]) == 12
    assert done.stderr.index("kind=config") < done.stderr.index("session ready")
