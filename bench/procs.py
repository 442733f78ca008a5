"""Child processes of the benchmark, and what /proc says about them.

Invariants:
* Each child runs in its own session with stdout/stderr in files (never a pipe
  nobody reads); `stop()` signals that pid only (SIGTERM, a grace, SIGKILL) and
  always reaps it.
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

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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

    def output(self, limit: int = 3000) -> str:
        text = ""
        for label, path in (("stdout", self.stdout), ("stderr", self.stderr)):
            data = path.read_text(errors="replace") if path.exists() else ""
            text += f"--- {self.name} {label} (last {limit} chars) ---\n{data[-limit:]}\n"
        return text

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM, wait up to `grace`, then SIGKILL; returns the exit status."""
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
    while not ready():
        if child is not None and not child.alive():
            raise RuntimeError(
                f"{child.name} exited ({child.popen.returncode}) before {what}\n{child.output()}"
            )
        if time.monotonic() > deadline:
            extra = child.output() if child is not None else ""
            raise TimeoutError(f"{what}: not ready after {timeout}s\n{extra}")
        time.sleep(interval)


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces; the fields after it are fixed.
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    """A `kB` line of /proc/<pid>/status (VmHWM, VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux `clear_refs` value 5); False when refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _parent_of(stat_text: str) -> int:
    return int(stat_text[stat_text.rindex(")") + 2 :].split()[1])


def tree(pid: int) -> list[int]:
    """`pid` and its live descendants (a proxy's workers, squid's helpers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            children.setdefault(_parent_of((entry / "stat").read_text()), []).append(
                int(entry.name)
            )
        except (OSError, ValueError):
            continue  # exited while we looked
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(children.get(current, []))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `pid` and its live descendants."""
    total = 0.0
    for member in tree(pid):
        try:
            total += cpu_seconds(member)
        except OSError:
            continue
    return total
