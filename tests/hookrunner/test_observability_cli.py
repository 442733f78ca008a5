"""`hookrunner --log-format json session --metrics`: the shared server and JSON log lines.

A real `hookrunner` process; its stderr is read line by line as the readiness signal.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from typing import Any

from sandbox_egress.common.serve import version
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ, command, pre_group, rule

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy


def get(url: str) -> tuple[int, str]:
    try:
        with OPENER.open(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


BOUNDARY_WARNING = ("warning", "hookrunner.report")


def test_json_log_lines_healthz_and_build_info(env: Env) -> None:
    env.hooks({"gate": pre_group(rule("read_file", command("echo not-json")))})
    argv = [HOOKRUNNER, "--log-format", "json", "session", "--workspace", str(env.workspace)]
    argv += ["--system-config", str(env.system_config), "--metrics", "127.0.0.1:0"]
    argv += ["--tool-user", "root"]  # a 0700 workspace: no "cannot write" warning (issue 20)
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_environ(),
        bufsize=1,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    try:
        records: list[dict[str, Any]] = []
        while not records or records[-1]["message"] != "hookrunner: session ready":
            line = process.stderr.readline()
            assert line, "session exited before it was ready"
            records.append(json.loads(line))
        # Without root's capabilities (as CI runs these tests) the runner first says, once,
        # that it cannot build the tool's namespace (D190): a JSON record too.
        boundary = [r for r in records if "kind=boundary" in r["message"]]
        assert [(r["level"], r["logger"]) for r in boundary] in ([], [BOUNDARY_WARNING])
        records = [r for r in records if r not in boundary]
        assert [(r["level"], r["logger"]) for r in records] == [("info", "hookrunner")] * 2
        assert records[0]["message"].startswith("hookrunner: metrics on http://127.0.0.1:")
        url = records[0]["message"].removeprefix("hookrunner: metrics on ")
        assert get(url.removesuffix("/metrics") + "/healthz") == (200, "ok\n")
        status, text = get(url)
        assert status == 200
        assert f'hookrunner_build_info{{version="{version()}"}} 1.0' in text.splitlines()
        assert "process_start_time_seconds" in {line.split(" ")[0] for line in text.splitlines()}

        call = {"tool_call": {"name": "read_file", "args": {"path": "a.txt"}}}
        process.stdin.write(json.dumps({"event": "pre_tool_execution", **call}) + "\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline()) == {"decision": "allow"}
        # The fail-open warning, then the decision line: one JSON record each.
        warning = json.loads(process.stderr.readline())
        assert (warning["level"], warning["logger"]) == ("warning", "hookrunner.report")
        assert warning["message"].startswith(
            "hookrunner: warning kind=fail_open event=pre_tool_execution type=command outcome=unparseable "
        ), warning
        decision = json.loads(process.stderr.readline())
        assert decision["level"] == "info"
        assert decision["message"] == (
            "hookrunner: decision event=pre_tool_execution tool=read_file decision=allow handlers=1"
        )
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()
