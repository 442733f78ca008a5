"""Child processes of the benchmark, and what /proc says about them.

Starting, stopping and waiting are the tests' own (`testbed.procs`, re-exported
here): each child in its own session with its output in files, stopped by pid with
SIGTERM, a grace, then SIGKILL, and waited for by polling under a deadline.
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed.procs import Child, start, wait_until

__all__ = [
    "Child",
    "cpu_seconds",
    "reset_peak_rss",
    "start",
    "status_kib",
    "tree",
    "tree_cpu_seconds",
    "wait_until",
]

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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
