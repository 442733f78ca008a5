"""What the runner costs per tool call as the real Claude Code CLI sees it (issue 35, D243).

`python -m bench.claude_cli [--calls N] [--runs R]` (root: it makes a network namespace).
The CLI and the scripted fake model of tests/hookrunner/ax/test_claude_cli.py (only the
model is mocked) run a session of N Bash calls three ways: no hooks, the user's four
hooks run by Claude Code itself, and the same hooks after `hookrunner claude install`
(the runner as the hook of every event, reached through its quick client). It prints
the median wall time of each and the cost per tool call (PreToolUse and PostToolUse)
against the session without hooks. The figures are ratios of one run: print `uptime`
with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed.claude_code import ClaudeHome, claude_binary
from testbed.netns import Namespaces, netns_available

MODES = ("none", "direct", "installed")


def session(home: ClaudeHome, mode: str, script: list[dict[str, Any]]) -> float:
    if mode != "none":
        home.write_settings("user")
    if mode == "installed" and home.install("user").returncode != 0:
        raise RuntimeError("hookrunner claude install failed")
    started = time.monotonic()
    run = home.run(script)
    took = time.monotonic() - started
    if run.code != 0 or run.hook_problems():
        raise RuntimeError(f"{mode}: exit {run.code}, {run.hook_problems()}: {run.stderr}")
    return took


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="Bash calls per session")
    parser.add_argument("--runs", type=int, default=3, help="sessions per way (the median)")
    args = parser.parse_args(argv)
    if (reason := netns_available()) is not None:
        print(f"bench.claude_cli: {reason}", file=sys.stderr)
        return 2
    calls = [
        {"tool_use": {"name": "Bash", "input": {"command": f"echo {i}"}}} for i in range(args.calls)
    ]
    script: list[dict[str, Any]] = [*calls, {"text": "done"}]
    claude = claude_binary()
    namespaces = Namespaces(f"cb{os.getpid() % 100000}")
    medians: dict[str, float] = {}
    try:
        namespaces.add_namespaces(f"{namespaces.tag}m")
        for mode in MODES:
            times = []
            for _ in range(args.runs):
                root = Path(tempfile.mkdtemp(prefix="cc-bench-"))
                home = ClaudeHome(root, claude, f"{namespaces.tag}m")
                try:
                    times.append(session(home, mode, script))
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                    shutil.rmtree(home.run_dir, ignore_errors=True)
            medians[mode] = statistics.median(times)
            print(f"{mode:9} {medians[mode]:6.2f} s  ({', '.join(f'{t:.2f}' for t in times)})")
    finally:
        namespaces.close()
    for mode in MODES[1:]:
        per_call = (medians[mode] - medians["none"]) / args.calls * 1000
        print(f"{mode:9} {per_call:6.0f} ms per tool call (PreToolUse + PostToolUse)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
