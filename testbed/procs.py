"""Child processes of the tests and the benchmark: started with logs to files, stopped by pid.

Invariants:
* Each child runs in its own session, its stdout/stderr go to files (never a pipe
  nobody reads), and `stop()` sends SIGTERM to that pid only, then SIGKILL after a
  grace, and always reaps it.
* Waiting is polling a readiness predicate under a deadline, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self, limit: int = 4000) -> str:
        text = ""
        for label, path in (("stdout", self.stdout), ("stderr", self.stderr)):
            data = path.read_text(errors="replace") if path.exists() else ""
            text += f"--- {self.name} {label} (last {limit} chars) ---\n{data[-limit:]}\n"
        return text

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM, wait up to `grace`, then SIGKILL; returns the exit status (None: the
        child outlived SIGKILL by `grace`, e.g. stuck in the kernel)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                return self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
        try:
            return self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return None


def start(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    env: Mapping[str, str] | None = None,
) -> Child:
    stdout, stderr = log_dir / f"{name}.stdout", log_dir / f"{name}.stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    return Child(name, popen, stdout, stderr)


def wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    child: Child | None = None,
    interval: float = 0.05,
) -> None:
    """Poll `ready` until it is true; fail early (with the child's output) if `child` dies."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if child is not None and not child.alive():
            raise RuntimeError(
                f"{child.name} exited ({child.popen.returncode}) before {what}\n{child.output()}"
            )
        if time.monotonic() > deadline:
            extra = child.output() if child is not None else ""
            raise TimeoutError(f"{what}: not ready after {timeout}s\n{extra}")
        time.sleep(interval)


def written(path: Path, last: str, timeout: float = 20.0) -> str:
    """The text of `path` once it ends with `last` (a background run writes in pieces:
    its first line alone is not its answer), or what it holds when `timeout` runs out,
    for the caller's assertion to show."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith(last):
            break
        time.sleep(0.05)
    return path.read_text() if path.exists() else ""
