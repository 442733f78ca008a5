"""Command handlers with real child processes: deadlines, process groups, caps, causes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.common.process import OUTPUT_CAP, run_process
from sandbox_egress.hookrunner.outcome import Outcome
from tests.hookrunner.helpers import Env, command, pre_group, rule


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that never reaps is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@contextlib.contextmanager
def recorded_pids(path: Path) -> Iterator[list[int]]:
    """The pids a hook wrote to ``path``; any still running at the end are killed by pid."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        if path.exists():
            for pid in (int(x) for x in path.read_text().split()):
                if alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)


def _pre(env: Env, line: str, timeout: int | None = None, args: dict | None = None):
    env.hooks({"g": pre_group(rule("*", command(line, timeout)))})
    session = env.session()
    started = time.monotonic()
    decision = session.pre("code_execution", args or {"code": "ls", "language": "bash"})
    return decision, time.monotonic() - started


def test_timeout_kills_a_forking_group_even_when_a_grandchild_holds_the_pipe(env: Env) -> None:
    pids = env.root / "pids"
    stubborn = env.script(
        "stubborn.py",
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "sys.stdout.write('holding stdout\\n'); sys.stdout.flush()\n"
        "time.sleep(60)\n",
    )
    line = f"echo $$ >> {pids}; {stubborn} & sh -c 'echo $$ >> {pids}; exec sleep 60' & sleep 60"
    with recorded_pids(pids):
        decision, elapsed = _pre(env, line, timeout=1)
        recorded = [int(x) for x in pids.read_text().split()]
        assert len(recorded) == 3
        assert [pid for pid in recorded if alive(pid)] == []
    assert elapsed < 1 + 1
    assert (decision.allowed, [r.outcome for r in decision.runs]) == (True, [Outcome.TIMEOUT])
    [warning] = env.warnings()
    assert (warning["kind"], warning["outcome"], warning["action"]) == (
        "fail_open",
        "timeout",
        "allowed",
    )
    assert warning["cause"] == "did not finish within 1 s; its process group was killed"
    assert env.runs("pre_tool_execution", "command", "timeout") == 1


def test_leftovers_are_killed_when_the_hook_exits_and_the_verdict_stands(env: Env) -> None:
    pids = env.root / "pids"
    line = (
        f"sleep 60 & echo $! >> {pids}; "
        """echo '{"decision": "deny", "reason": "stop"}'"""
    )
    with recorded_pids(pids):
        decision, _ = _pre(env, line, timeout=5)
        [pid] = [int(x) for x in pids.read_text().split()]
        assert not alive(pid)
    assert (decision.allowed, decision.reason) == (False, "stop")


def test_fifty_megabytes_of_stdout_is_capped_and_allows(env: Env) -> None:
    line = """echo '{"decision": "deny"}'; head -c 52428800 /dev/zero"""
    decision, _ = _pre(env, line, timeout=10)
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (
        True,
        Outcome.TRUNCATED,
        "output exceeded the 1 MiB cap",
    )


def test_fifty_megabytes_of_stderr_does_not_hide_a_deny(env: Env) -> None:
    line = """head -c 52428800 /dev/zero >&2; echo '{"decision": "deny", "reason": "r"}'"""
    decision, _ = _pre(env, line, timeout=10)
    assert (decision.allowed, decision.reason) == (False, "r")


def test_mechanism_keeps_exactly_the_cap() -> None:
    result = run_process(
        ["/bin/sh", "-c", "head -c 52428800 /dev/zero; head -c 3000000 /dev/zero >&2"],
        stdin=b"",
        cwd="/",
        env={"PATH": os.environ["PATH"]},
        timeout=10,
    )
    assert (len(result.stdout), result.stdout_truncated) == (OUTPUT_CAP, True)
    assert (len(result.stderr), result.stderr_truncated) == (OUTPUT_CAP, True)
    assert (result.returncode, result.timed_out) == (0, False)


def test_a_hook_that_never_reads_a_large_payload_still_decides(env: Env) -> None:
    line = """sleep 0.2; echo '{"decision": "deny", "reason": "unread"}'"""
    args = {"code": "x" * (4 * 1024 * 1024), "language": "bash"}
    decision, _ = _pre(env, line, timeout=5, args=args)
    assert (decision.allowed, decision.reason) == (False, "unread")


def test_a_hook_that_closes_stdin_at_once_still_decides(env: Env) -> None:
    line = """exec 0<&-; echo '{"decision": "deny", "reason": "closed"}'"""
    decision, _ = _pre(env, line, timeout=5, args={"code": "y" * 1_000_000})
    assert (decision.allowed, decision.reason) == (False, "closed")


@pytest.mark.parametrize(
    ("line", "outcome", "cause"),
    [
        (
            "no-such-program-hookrunner-test",
            Outcome.NOT_FOUND,
            "exited with status 127 (stderr: '/bin/sh: 1: no-such-program-hookrunner-test: "
            "not found')",
        ),
        ("exit 3", Outcome.EXIT_NONZERO, "exited with status 3"),
        (
            """echo '{"decision": "deny"}'; echo boom >&2; exit 1""",
            Outcome.EXIT_NONZERO,
            'exited with status 1 (stderr: \'boom\'); it printed {"decision": "deny"} but a '
            "non-zero exit status never denies",
        ),
        ("kill -SEGV $$", Outcome.CRASHED, "killed by SIGSEGV"),
        ("true", Outcome.EMPTY_OUTPUT, "printed nothing"),
        (
            "echo hello",
            Outcome.UNPARSEABLE,
            "output is not exactly one JSON value: Expecting value at character 0",
        ),
        ("""echo '{"decision": "allow"}'""", Outcome.ALLOW, "allowed"),
    ],
)
def test_each_cause_has_its_outcome(env: Env, line: str, outcome: Outcome, cause: str) -> None:
    decision, _ = _pre(env, line, timeout=5)
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (True, outcome, cause)
    assert env.runs("pre_tool_execution", "command", outcome.value) == 1
    warnings = env.warnings()
    if outcome is Outcome.ALLOW:
        assert warnings == []
    else:
        assert [(w["kind"], w["outcome"], w["cause"]) for w in warnings] == [
            ("fail_open", outcome.value, cause)
        ]


def test_not_executable_is_126(env: Env) -> None:
    script = env.root / "gate.sh"
    script.write_text('#!/bin/sh\necho \'{"decision": "deny"}\'\n')
    script.chmod(0o644)
    decision, _ = _pre(env, str(script), timeout=5)
    assert [r.outcome for r in decision.runs] == [Outcome.NOT_EXECUTABLE]
    assert decision.allowed


def test_spawn_error_when_the_workspace_disappears(env: Env) -> None:
    env.hooks({"g": pre_group(rule("*", command("true")))})
    session = env.session()
    for path in sorted(env.workspace.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    env.workspace.rmdir()
    decision = session.pre("read_file", {"path": "x"})
    [run] = decision.runs
    assert (decision.allowed, run.outcome, run.detail) == (
        True,
        Outcome.SPAWN_ERROR,
        "could not start the shell: No such file or directory",
    )


def test_near_miss_is_warned_as_such(env: Env) -> None:
    decision, _ = _pre(env, """echo '{"decision": "DENY", "reason": "r"}'""")
    assert (decision.allowed, [r.outcome for r in decision.runs]) == (True, [Outcome.NEAR_MISS])
    [warning] = env.warnings()
    assert (warning["kind"], warning["outcome"]) == ("near_miss", "near_miss")
    assert env.metrics.value("hook_warnings_total", kind="near_miss") == 1


def test_payload_on_stdin_and_workspace_as_working_directory(env: Env) -> None:
    seen = env.root / "seen.json"
    line = f"cat > {seen}; pwd >> {env.root / 'pwd'}"
    args = {"code": "rm -rf /tmp/x", "language": "bash"}
    _pre(env, line, args=args)
    assert json.loads(seen.read_text()) == {
        "tool_call": {"name": "code_execution", "args": args},
        "environment_id": "env_test",
    }
    assert (env.root / "pwd").read_text().strip() == os.path.realpath(env.workspace)


def test_default_timeout_is_thirty_seconds(env: Env) -> None:
    env.hooks({"g": pre_group(rule("*", command("true")))})
    [handler] = env.session().config.groups[0].pre[0].handlers
    assert handler.timeout == 30


def test_mechanism_reports_exit_status_and_both_streams() -> None:
    result = run_process(
        ["/bin/sh", "-c", "cat; echo err >&2; exit 7"],
        stdin=b"payload",
        cwd="/",
        env={"PATH": os.environ["PATH"]},
        timeout=5,
    )
    assert (result.returncode, result.stdout, result.stderr, result.timed_out) == (
        7,
        b"payload",
        b"err\n",
        False,
    )


@pytest.mark.parametrize(
    ("tail", "timeout", "outcome"),
    [
        ("""echo '{"decision": "deny", "reason": "r"}'""", 5, Outcome.DENY),
        ("sleep 60", 1, Outcome.TIMEOUT),
    ],
)
def test_a_process_that_left_the_group_cannot_hold_the_runner(
    env: Env, tail: str, timeout: int, outcome: Outcome
) -> None:
    # setsid escapes the process group (a documented limit); the runner must still
    # return, within the deadline plus the grace, although the escapee keeps stdout open.
    pids = env.root / "pids"
    wait = f"while [ ! -s {pids} ]; do sleep 0.01; done"  # it has left the group by then
    line = f"setsid sh -c 'echo $$ >> {pids}; exec sleep 60' & {wait}; {tail}"
    with recorded_pids(pids):
        decision, elapsed = _pre(env, line, timeout=timeout)
        assert len(pids.read_text().split()) == 1
    assert [r.outcome for r in decision.runs] == [outcome]
    assert elapsed < timeout + 1


def test_a_cancel_token_stops_the_wait_and_kills_the_group(tmp_path: Path) -> None:
    import threading

    from sandbox_egress.common.process import CancelToken

    pid_file = tmp_path / "pid"
    token = CancelToken()

    def cancel_once_started() -> None:
        while not pid_file.exists():
            time.sleep(0.005)
        token.set()

    helper = threading.Thread(target=cancel_once_started)
    helper.start()
    with recorded_pids(pid_file):
        try:
            result = run_process(
                [
                    "/bin/sh",
                    "-c",
                    f"sleep 60 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait",
                ],
                stdin=b"",
                cwd=str(tmp_path),
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                timeout=30,
                cancel=token,
            )
        finally:
            helper.join()
        grandchild = int(pid_file.read_text())
        assert (result.cancelled, result.timed_out) == (True, False)
        assert result.duration < 30
        assert not alive(grandchild)
    # A set token refuses to start anything more.
    again = run_process(
        ["/bin/true"], stdin=b"", cwd=str(tmp_path), env={}, timeout=5, cancel=token
    )
    assert (again.cancelled, again.returncode) == (True, None)
    token.close()
