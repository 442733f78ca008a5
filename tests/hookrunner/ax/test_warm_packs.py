"""Packs inside the warm runner's call (issue 44, D396): the same decisions as the pack
processes, no process started for them, and a pack past its deadline fails closed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.model import Cause, Verdict
from sandbox_egress.hookrunner.ax.packs import main, warm
from sandbox_egress.hookrunner.kernel import Kernel
from tests.hookrunner.ax.conftest import AxEnv

PACKS = ["block-force-push", "protect-env-files", "log-bash-commands", "require-tests-on-stop"]
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("PreToolUse", "Bash", {"command": "git push --force origin main"}),
    ("PreToolUse", "Bash", {"command": "git push -q -f origin main"}),
    ("PreToolUse", "Bash", {"command": "git push origin main"}),
    ("PreToolUse", "Bash", {"command": "cat .env"}),
    ("PreToolUse", "Read", {"file_path": ".env"}),
    ("PreToolUse", "Bash", {"command": "ls -la"}),
    ("PostToolUse", "Edit", {"file_path": "a.py"}),
    ("Stop", "", {}),
]


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The commands the kernel starts as processes (counted, then run as usual)."""
    commands: list[str] = []
    real = Kernel.spawn

    def counting(self: Kernel, command: str, **kwargs: Any) -> Any:
        commands.append(command)
        return real(self, command, **kwargs)

    monkeypatch.setattr(Kernel, "spawn", counting)
    yield commands


def fire_all(ax: AxEnv) -> list[tuple[Verdict, Cause, str | None, tuple[str, ...]]]:
    session = ax.session()
    found = []
    for event, tool, args in CASES:
        payload: dict[str, Any] = {"tool": tool, "args": args} if tool else {}
        if event == "PostToolUse":
            payload["output"] = "ok"
        result = session.fire(event, payload)
        found.append((result.decision, result.cause, result.reason, result.notices))
    return found


def test_warm_packs_decide_as_the_pack_processes(ax: AxEnv, spawned: list[str]) -> None:
    ax.hooks({"packs": PACKS})
    (ax.workspace / ".env").write_text("SECRET=1\n")
    as_processes = fire_all(ax)
    assert len(spawned) > len(CASES)  # one process per pack entry and call
    spawned.clear()
    warm.enable()
    try:
        in_the_call = fire_all(ax)
    finally:
        warm._enabled.clear()
    assert spawned == []  # no process for any pack
    assert in_the_call == as_processes
    assert [d for d, *_ in in_the_call[:6]] == [
        Verdict.DENY, Verdict.DENY, Verdict.ALLOW, Verdict.DENY, Verdict.DENY, Verdict.ALLOW,
    ]  # fmt: skip
    logged = (ax.state / "hookrunner" / "bash-commands.jsonl").read_text().splitlines()
    assert len(logged) == 2 * 2  # log-bash-commands ran for each Bash call not blocked first


def test_a_warm_pack_past_its_deadline_blocks(ax: AxEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck(context: main.Context) -> int:
        time.sleep(30)
        return 0

    monkeypatch.setitem(main.HANDLERS, "block-force-push", stuck)
    started = time.monotonic()
    result = warm.run(
        "block-force-push",
        stdin=b'{"command": "ls"}',
        cwd=str(ax.workspace),
        env={"HOOK_EVENT": "PreToolUse", "HOOK_TOOL": "Bash"},
        timeout=0.3,
    )
    assert time.monotonic() - started < 5
    assert (result.timed_out, result.returncode) == (True, -9)


def test_a_warm_pack_that_breaks_exits_1(ax: AxEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(context: main.Context) -> int:
        raise RuntimeError("boom")

    monkeypatch.setitem(main.HANDLERS, "protect-env-files", broken)
    result = warm.run("protect-env-files", stdin=b"{}", cwd=str(ax.workspace), env={}, timeout=5)
    assert (result.returncode, result.stderr) == (
        1,
        b"protect-env-files: internal error (RuntimeError: boom); nothing checked\n",
    )
