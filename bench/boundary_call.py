"""Scenario 12: one Bash call of Claude Code under the runner's boundary (issue 44, D430).

What every Bash call of an agent pays once the runner answers with `updatedInput`
(`enforce.bound.shell_command`): the wrapped `eval true`, run as Claude Code runs it
(`bash -c TEXT` in the workspace), in a workspace that is a git repository with a
`.env` (so the masks walk finds one, and the git guard is mounted), beside a bare
`bash -c true`, alternated call by call in the same run (bench.hooks._pair). Wall time
(median, p90) and CPU time per call (user + system of the children, less inflated by a
busy machine's run queue). Each call is checked (exit 0, empty output). Needs root or
an unprivileged user namespace (the boundary itself); without one the section says so.
`python -m bench.boundary_call [--calls N]` prints one JSON object; `make bench` runs it
as `boundary`. A benchmark, not a timed test: the figures are read with the machine's
load (printed with them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import paired
from bench.hooks import _pair
from bench.paired import checked_call, cpu_ms, load_line
from sandbox_egress.hookrunner.enforce.bound import shell_command
from sandbox_egress.hookrunner.enforce.toolns import boundary_problem


def measure(calls: int = 200) -> dict[str, Any]:
    results: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    problem = boundary_problem()
    if problem is not None:
        results["skipped"] = problem
        return results
    root = Path(tempfile.mkdtemp(prefix="bench-boundary-"))
    try:
        workspace = root / "ws"
        workspace.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
               "SHELL": "/bin/bash", "LANG": "C.UTF-8"}  # fmt: skip
        subprocess.run(["git", "init", "-q", str(workspace)], check=True, env=env, timeout=60)
        (workspace / ".env").write_text("TOKEN=not-a-real-secret\n")
        (workspace / "src").mkdir()
        for i in range(50):
            (workspace / "src" / f"m{i}.py").write_text("x = 1\n")
        bounded = checked_call(
            ["bash", "-c", shell_command("eval true", workspace)], env, workspace, _silent
        )
        bare = checked_call(["bash", "-c", "true"], env, workspace, _silent)
        result = _pair(bounded, bare, calls)
        result["cpu_ms_per_call"] = {
            "bounded": cpu_ms(bounded, calls),
            "bare": cpu_ms(bare, calls),
        }
        results["call"] = result
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["loadavg_after"] = os.getloadavg()
    return results


def lines(section: dict[str, Any], grid: Callable[..., list[str]] | None = None) -> list[str]:
    out = ["Scenario 12: a Bash call under the runner's boundary (`eval true`; ms)"]
    if "skipped" in section:
        return [*out, f"not measured: {section['skipped']}"]
    one = section["call"]
    cpu = one["cpu_ms_per_call"]
    out.append("bounded median  p90    bare bash -c true median  added  CPU/call (bare)")
    out.append(
        f"{one['runner']['median_ms']:14.1f}  {one['runner']['p90_ms']:5.1f}"
        f"  {one['bare']['median_ms']:24.1f}  {one['overhead_ms']:5.1f}"
        f"  {cpu['bounded']:8.1f} ({cpu['bare']:.1f})"
    )
    out.append(load_line(section))
    return out


def _silent(stdout: bytes) -> bool:
    return not stdout.strip()


def main(argv: list[str]) -> int:
    return paired.main(__doc__, measure, lines, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
