"""The proxy runs under `python -O`: mitmproxy's debug-only checks off, ours kept (D75).

mitmproxy validates every field of every Request and Response it builds in `if __debug__`
blocks (`_check_types`-style asserts): 10-20 % of the CPU of a kept-alive request. `-O`
removes them. The project itself never relies on `assert` (`common.invariant`), so
nothing of ours is lost.

`egress-proxy run`, started by its console script, re-executes itself once as
`python -m sandbox_egress.runtime.cli ...` with `PYTHONOPTIMIZE=1` in its environment (same
pid, same arguments; `--workers` children inherit the variable). An operator who sets
`PYTHONOPTIMIZE` themselves is obeyed: `PYTHONOPTIMIZE=0` keeps the checks on.
The image precompiles the optimized bytecode (`.opt-1.pyc`), so a start compiles nothing.
"""

from __future__ import annotations

import os
import sys

OPTIMIZE_ENV = "PYTHONOPTIMIZE"


def reexec_argv() -> list[str] | None:
    """The command to re-execute this process with, or None when it should not."""
    if sys.flags.optimize or OPTIMIZE_ENV in os.environ:
        return None
    return [sys.executable, "-m", "sandbox_egress.runtime.cli", *sys.argv[1:]]


def reexec_optimized() -> None:
    """Replace this process by the same command under -O (returns only when not needed)."""
    argv = reexec_argv()
    if argv is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, {**os.environ, OPTIMIZE_ENV: "1"})


def describe() -> str:
    """For the start banner: whether the debug-only checks are off."""
    if sys.flags.optimize:
        return f"python -O (optimize level {sys.flags.optimize}): debug-only checks off"
    return "python without -O: debug-only checks on"
