"""The real ``hookrunner fire`` command, and ``validate`` reading .ax-code/hooks.json."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.hookrunner.ax.conftest import AxEnv, cc, entry
from tests.hookrunner.ax.test_observe import gated, wait_for
from tests.hookrunner.helpers import HOOKRUNNER


def fire(ax: AxEnv, event: str, payload: Any, *flags: str, **environ: str):
    return subprocess.run(
        [HOOKRUNNER, "fire", event, "--workspace", str(ax.workspace), *flags],
        input=payload if isinstance(payload, str) else json.dumps(payload),
        capture_output=True,
        text=True,
        env=ax.environ(**environ),
        timeout=60,
    )


def test_fire_prints_the_decision_and_exits_1_on_deny(ax: AxEnv) -> None:
    ax.hooks({"packs": ["block-force-push"]})
    payload = {"tool": "bash", "args": {"command": "git push origin +main"}}
    denied = fire(ax, "PreToolUse", payload, "--trust-project-hooks", "--session-id", "s1")
    assert denied.returncode == 1
    assert json.loads(denied.stdout) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "block_on_failure",
        "reason": "block-force-push: `git push +main` rewrites the remote branch's history and "
        "is blocked. Push without force (rebase or merge first), or ask a human to do it.",
        "source": "block-force-push",
    }
    assert "hookrunner: decision event=PreToolUse tool=bash decision=deny" in denied.stderr
    untrusted = fire(ax, "PreToolUse", payload)
    assert (untrusted.returncode, json.loads(untrusted.stdout)["cause"]) == (0, "no_hooks")
    assert "project hooks are off" in untrusted.stderr
    trusted = fire(ax, "PreToolUse", payload, AX_CODE_TRUST_PROJECT_CONFIG="1")
    assert trusted.returncode == 1


def test_fire_prints_the_feedback_block(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("PostToolUse", "echo 'run the linter'")]})
    done = fire(
        ax, "PostToolUse", {"tool": "edit", "args": {}, "output": "ok"}, "--trust-project-hooks"
    )
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "event": "PostToolUse",
        "decision": "allow",
        "cause": "non_blocking",
        "feedback": '<hook_feedback event="PostToolUse">\nrun the linter\n</hook_feedback>',
        "tool_result": 'ok\n\n<hook_feedback event="PostToolUse">\nrun the linter\n</hook_feedback>',
    }


def test_fire_ask_exits_1_and_says_ask_only_when_interactive(ax: AxEnv) -> None:
    ax.hooks({"hooks": [cc("PreToolUse", 'echo \'{"permissionDecision": "ask"}\'')]})
    payload = {"tool": "bash", "args": {}}
    asked = fire(ax, "PreToolUse", payload, "--trust-project-hooks", "--interactive")
    assert (asked.returncode, json.loads(asked.stdout)["decision"]) == (1, "ask")
    headless = fire(ax, "PreToolUse", payload, "--trust-project-hooks")
    assert (headless.returncode, json.loads(headless.stdout)["cause"]) == (1, "ask_headless")


def test_fire_observation_event_answers_before_its_hooks_run(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("SessionEnd", gated(ax, "end"), timeout=30)]})
    with subprocess.Popen(
        [
            HOOKRUNNER,
            "fire",
            "SessionEnd",
            "--workspace",
            str(ax.workspace),
            "--trust-project-hooks",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ax.environ(),
    ) as proc:
        try:
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.write(json.dumps({"reason": "archive", "session_id": "s9"}).encode())
            proc.stdin.close()
            # The whole answer and EOF arrive while the hook still waits for its go file.
            answer = proc.stdout.read()
            assert json.loads(answer) == {
                "event": "SessionEnd",
                "decision": "allow",
                "cause": "queued",
            }
            wait_for(ax.root / "end.started")
            assert proc.poll() is None
            (ax.root / "end.go").touch()
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert json.loads((ax.root / "end.out").read_text())["session_id"] == "s9"


def test_fire_usage_and_payload_errors_exit_2(ax: AxEnv) -> None:
    assert fire(ax, "PreToolUse", "{not json").returncode == 2
    bad = fire(ax, "PreToolUse", {"args": {}})
    assert (bad.returncode, bad.stdout) == (2, "")
    assert '"tool" must be a non-empty string' in bad.stderr
    assert fire(ax, "pre_tool_execution", {}).returncode == 2
    assert fire(ax, "Stop", "").returncode == 0  # an empty payload is {}


def test_validate_reports_ax_problems_without_trust(ax: AxEnv) -> None:
    ax.hooks(
        {"packs": ["block-force-push", "nope"], "hooks": [entry("Stop", "x", blockOnFailure=True)]}
    )
    done = subprocess.run(
        [
            HOOKRUNNER,
            "validate",
            "--workspace",
            str(ax.workspace),
            "--system-config",
            "/dev/null/x",
        ],
        capture_output=True,
        text=True,
        env=ax.environ(),
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert f'{ax.hooks_file}: $.packs[1]: unknown pack "nope"' in lines[1]
    assert (
        lines[2]
        == f"{ax.hooks_file}: $.hooks[0].blockOnFailure: has no effect: Stop cannot block (ignored)"
    )


def validate(ax: AxEnv, *flags: str) -> subprocess.CompletedProcess[str]:
    """`hookrunner validate` with an empty operator hooks.json, so only AX files speak."""
    system = ax.root / "system-hooks.json"
    system.write_text("{}")
    return subprocess.run(
        [HOOKRUNNER, "validate", "--workspace", str(ax.workspace), "--system-config", str(system)]
        + list(flags),
        capture_output=True,
        text=True,
        env=ax.environ(),
        timeout=60,
    )


def test_validate_checks_an_operator_ax_file(ax: AxEnv) -> None:
    operator = ax.root / "operator-hooks.json"
    operator.write_text(json.dumps({"packs": ["block-force-push"], "hooks": [entry("Stop", "x")]}))
    ok = validate(ax, "--ax-config", str(operator))
    assert (ok.returncode, ok.stdout) == (0, "")
    assert ok.stderr == f"hookrunner: valid ({ax.root / 'system-hooks.json'}, {operator})\n"
    operator.write_text(
        json.dumps(
            {
                "packs": ["nope"],
                "hooks": [
                    {"event": "Stop", "command": " ", "timeout": 2.0, "env": {"A": "1"}},
                    entry("PreToolUse", "x", protocol="claude"),
                ],
            }
        )
    )
    bad = validate(ax, "--ax-config", str(operator))
    assert (bad.returncode, bad.stderr) == (1, "")
    assert bad.stdout.splitlines() == [
        f'{operator}: $.packs[0]: unknown pack "nope"; known: format-after-edit, '
        "block-force-push, require-tests-on-stop, protect-env-files, log-bash-commands; skipped",
        f"{operator}: $.hooks[0].env: a hooks file cannot choose the environment or trust; "
        "only the runner's own environment and flags can (ignored)",
        f"{operator}: $.hooks[0].command: must be a non-empty string; entry skipped",
        f"{operator}: $.hooks[0].timeout: must be a positive integer of seconds; entry skipped",
        f'{operator}: $.hooks[1].protocol: must be "claude-code", got "claude"; entry skipped',
    ]


def test_validate_an_operator_ax_file_that_is_not_json_or_missing(ax: AxEnv) -> None:
    operator = ax.root / "operator-hooks.json"
    operator.write_text('{"hooks": [}')
    bad = validate(ax, "--ax-config", str(operator))
    assert (bad.returncode, bad.stdout) == (
        1,
        f"{operator}: line 1, column 12: not valid JSON: Expecting value\n",
    )
    missing = validate(ax, "--ax-config", str(ax.root / "nope.json"))
    assert (missing.returncode, missing.stdout) == (
        1,
        f"{ax.root / 'nope.json'}: $: file does not exist\n",
    )
