"""Observation-only events: never block, never delay, ids only, owned by the session."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.model import Cause, Verdict
from tests.hookrunner.ax.conftest import AxEnv, cc, entry
from tests.hookrunner.test_command import alive

OBSERVATION = ["SessionStart", "SessionEnd", "PostCompact", "Interrupt", "PostToolUseFailure"]


def wait_for(path: Path, timeout: float = 10.0) -> None:
    """Readiness: the file a hook writes when it has started."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def gated(ax: AxEnv, name: str) -> str:
    """A hook that says it started, then waits for the test's go file, then records stdin."""
    started, go, out = (ax.root / f"{name}.{x}" for x in ("started", "go", "out"))
    return (
        f"touch {started}; while [ ! -e {go} ]; do sleep 0.01; done; cat > {out}.tmp; "
        f"mv {out}.tmp {out}"
    )


def test_firing_does_not_wait_for_the_hook(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("SessionEnd", gated(ax, "end"), timeout=20)]})
    session = ax.session()
    result = session.fire("SessionEnd", {"reason": "archive", "summary": "we talked about X"})
    # fire returned while the hook is still waiting for the go file: it never waited for it.
    assert (result.decision, result.cause) == (Verdict.ALLOW, Cause.QUEUED)
    wait_for(ax.root / "end.started")
    assert not (ax.root / "end.out").exists()
    (ax.root / "end.go").touch()
    session.close(timeout=None)
    document = json.loads((ax.root / "end.out").read_text())
    assert set(document) == {"session_id", "reason", "timestamp"}
    assert (document["session_id"], document["reason"]) == ("ses_test", "archive")
    [warning] = ax.warnings()
    assert (warning["kind"], warning["dropped"]) == ("payload", "summary")


@pytest.mark.parametrize("event", OBSERVATION)
def test_observation_hooks_never_block(ax: AxEnv, event: str) -> None:
    ax.hooks(
        {
            "hooks": [
                entry(event, "echo no >&2; exit 2", blockOnFailure=True),
                cc(event, 'echo \'{"permissionDecision": "deny"}\''),
                cc(event, "exit 2"),
            ]
        }
    )
    session = ax.session()
    payload = {"tool": "bash"} if event == "PostToolUseFailure" else {}
    result = session.fire(event, payload)
    assert (result.decision, result.cause, result.reason) == (Verdict.ALLOW, Cause.QUEUED, None)
    session.close(timeout=None)
    assert ax.runs(event, "exit_nonzero") == 2
    assert ax.runs(event, "ok") == 1


def test_post_tool_use_failure_carries_no_tool_output(ax: AxEnv) -> None:
    out = ax.root / "failure.json"
    ax.hooks({"hooks": [cc("PostToolUseFailure", f"cat > {out}", matcher="bash")]})
    session = ax.session()
    session.fire(
        "PostToolUseFailure",
        {
            "tool": "bash",
            "tool_call_id": "call_9",
            "reason": "error",
            "error": "cat: /secret/path: permission denied",
            "args": {"command": "cat /secret/path"},
        },
    )
    session.close(timeout=None)
    document = json.loads(out.read_text())
    document.pop("timestamp")
    assert document == {
        "session_id": "ses_test",
        "hook_event_name": "PostToolUseFailure",
        "tool_use_id": "call_9",  # Claude Code's name, as on every tool event
        "reason": "error",
        "tool_name": "Bash",
    }


def test_close_stops_a_running_observation_hook_and_drops_the_rest(ax: AxEnv) -> None:
    pid_file = ax.root / "pid"
    ax.hooks(
        {
            "hooks": [
                entry(
                    "Interrupt",
                    f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 60",
                    timeout=60,
                )
            ]
        }
    )
    session = ax.session()
    assert session.fire("Interrupt", {}).cause is Cause.QUEUED
    assert session.fire("Interrupt", {}).cause is Cause.QUEUED
    wait_for(pid_file)
    pid = int(pid_file.read_text())
    try:
        started = time.monotonic()
        session.close(timeout=0)
        assert time.monotonic() - started < 5
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, 9)
    assert ax.runs("Interrupt", "cancelled") == 1
    assert ax.metrics.value("hook_observations_dropped_total", event="Interrupt") == 1
    assert [(w["kind"], w.get("outcome")) for w in ax.warnings()] == [
        ("hook_failure", "cancelled"),
        ("dropped", None),
    ]
    assert session.fire("Interrupt", {}).cause is Cause.DROPPED  # closed: nothing runs


def test_a_full_queue_drops_and_counts(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("PostCompact", gated(ax, "compact"), timeout=20)]})
    session = ax.session(observation_capacity=1)
    assert session.fire("PostCompact", {}).cause is Cause.QUEUED
    wait_for(ax.root / "compact.started")  # the first is running: the queue is empty again
    assert session.fire("PostCompact", {}).cause is Cause.QUEUED
    assert session.fire("PostCompact", {}).cause is Cause.DROPPED
    (ax.root / "compact.go").touch()
    session.close(timeout=None)
    assert ax.runs("PostCompact", "ok") == 2
    assert ax.metrics.value("hook_observations_dropped_total", event="PostCompact") == 1
    assert [w["cause"] for w in ax.warnings() if w["kind"] == "dropped"] == [
        "1 observation events are already queued"
    ]


def test_observation_events_without_hooks_queue_nothing(ax: AxEnv) -> None:
    ax.hooks({"hooks": [entry("SessionStart", "true", matcher="*")]})
    session = ax.session()
    assert session.fire("SessionEnd", {}).cause is Cause.NO_HOOKS
    assert session.fire("SessionStart", {"source": "startup"}).cause is Cause.QUEUED
    session.close(timeout=None)
    assert ax.runs("SessionStart", "ok") == 1
