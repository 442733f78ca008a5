"""A command timed against a bare one, call by call in the same run (scenarios 11 and 12).

What `bench.claude_hook` and `bench.boundary_call` share: each call is a real process,
checked (exit 0 and the output the scenario expects, else `RuntimeError`: a failing call
is never timed as a fast one); CPU time per call is read from the children's rusage (and
a server's `/proc/PID/stat`, where the work is done by a process that is not a child),
less inflated than wall time by a busy machine's run queue; the machine's load is
printed with the figures. The alternation itself is `bench.hooks._pair`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def checked_call(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    ok: Callable[[bytes], bool],
    payload: bytes | None = None,
) -> Callable[[], None]:
    """One run of `argv` (`payload` on stdin); raises unless it exits 0 and `ok(stdout)`."""

    def call() -> None:
        done = subprocess.run(
            argv, input=payload, capture_output=True, env=env, cwd=cwd, timeout=60
        )
        if done.returncode != 0 or not ok(done.stdout):
            raise RuntimeError(
                f"exit {done.returncode}: {done.stdout[-200:]!r} {done.stderr[-300:]!r}"
            )

    return call


def cpu_ms(call: Callable[[], None], calls: int, server: int | None = None) -> float:
    """CPU time per call in ms (user + system): this process's children, and `server`'s
    reaped children when given (the work a warm server forks for each call)."""

    def spent() -> float:
        own = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = own.ru_utime + own.ru_stime
        if server is not None:
            fields = Path(f"/proc/{server}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        return total

    before = spent()
    for _ in range(calls):
        call()
    return (spent() - before) * 1000 / calls


def load_line(section: dict[str, Any]) -> str:
    before = " ".join(f"{x:.1f}" for x in section["loadavg_before"])
    return f"load average before: {before} (a busy machine inflates every figure)"


def main(
    doc: str | None,
    measure: Callable[[int], dict[str, Any]],
    lines: Callable[[dict[str, Any]], list[str]],
    argv: Sequence[str],
) -> int:
    """`--calls N`: the section as one JSON object on stdout, its table on stderr."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls of each (alternated)")
    args = parser.parse_args(argv)
    section = measure(args.calls)
    print(json.dumps(section))
    print("\n".join(lines(section)), file=sys.stderr)
    return 0
