"""The configuration watch (runtime/lifecycle.py watch_file) applies a file only once its
content has been stable: a file written slowly in place is never applied half-written."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from sandbox_egress.runtime import lifecycle

V1 = 'network:\n  allowlist:\n    - domain: "*.example.com"\n'
HALF = 'network:\n  allowlist:\n    - domain: "*"\n'  # valid YAML: `*` on every port
WHOLE = HALF + "      ports: [443]\n"


class Script:
    """A fake clock and sleep: each poll advances time and runs the writes due then."""

    def __init__(self, path: Path, writes: dict[int, str], polls: int) -> None:
        self.path, self.writes, self.polls = path, writes, polls
        self.now, self.tick = 0.0, 0
        self.applied: list[str] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.tick += 1
        if self.tick > self.polls:
            raise asyncio.CancelledError
        self.now += seconds
        text = self.writes.get(self.tick)
        if text is not None:
            with open(self.path, "r+") as file:  # in place, as an editor without rename
                file.write(text)
                file.truncate()
            os.utime(self.path, ns=(int(self.now * 1e9), int(self.now * 1e9)))

    files: tuple[Path, ...] = ()  # no ${file:} secret read

    def fingerprints(self) -> tuple[lifecycle.Fingerprint, ...]:
        return (lifecycle.fingerprint(self.path),)

    def __call__(self, cause: str = "") -> bool:
        self.applied.append(self.path.read_text())
        return True


def run(script: Script, settle: float) -> list[str]:
    async def watch() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await lifecycle.watch_file(
                script,  # type: ignore[arg-type]  # a Reloader: `path`, called to reload
                interval=0.2,
                settle=settle,
                sleep=script.sleep,
                clock=script.clock,
            )

    asyncio.run(watch())
    return script.applied


def test_a_file_written_slowly_in_place_is_applied_only_whole(tmp_path: Path) -> None:
    # issue 21: a 1.6 s pause before the `ports:` line opened port 80 for `*`.
    config = tmp_path / "env.yaml"
    config.write_text(V1)
    script = Script(config, {1: HALF, 9: WHOLE}, polls=40)  # 1.6 s between the two writes
    assert run(script, settle=2.0) == [WHOLE]


def test_a_file_replaced_by_rename_is_applied_once_settled(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text(V1)
    script = Script(config, {1: WHOLE}, polls=40)
    assert run(script, settle=2.0) == [WHOLE]
    assert script.now >= 2.0
