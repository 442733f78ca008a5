"""Scenario 11: one Claude Code hook call through `hookrunner claude install` (issue 44).

What Claude Code pays per hook call (twice per tool call): the command `install` wrote
for PreToolUse, run as Claude Code runs it (`/bin/sh -c COMMAND`, the payload on stdin),
with the packs `block-force-push` and `protect-env-files` (an `--ax-config`) and one
user's shell hook (`cat >/dev/null`) configured, a Bash `ls -la` call (every hook runs,
the call is allowed), beside a bare `/bin/sh -c true` given the same payload, alternated
call by call in the same run (bench.hooks._pair). Two clients: the C client `install`
compiles when a compiler is there, and the Python client (`CC` pointing nowhere). The
warm runner is started by the first call and ended (by its pid) after. Each call's
outcome is checked (exit 0, and nothing or `allow` on stdout). No root, no network: `python -m
bench.claude_hook [--calls N]` prints one JSON object; `make bench` runs it as
`claudehook`. A benchmark, not a timed test: the figures are read with the machine's
load (printed with them).
"""

from __future__ import annotations

import json
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
from testbed.claude_code import server_pid, stop_warm_runners

HOOKRUNNER = str(Path(sys.executable).parent / "hookrunner")
PACKS = ["block-force-push", "protect-env-files"]


def _allowed(stdout: bytes) -> bool:
    """An allowed call's answer: nothing, or `allow` (with the command under the runner's
    boundary in `updatedInput` where there is one, D380)."""
    if not stdout.strip():
        return True
    specific = json.loads(stdout).get("hookSpecificOutput") or {}
    return bool(specific.get("permissionDecision") == "allow")


def _installed(root: Path, env: dict[str, str]) -> str:
    """Install into a fresh home; the PreToolUse command Claude Code would run."""
    settings = Path(env["HOME"]) / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    shell = {"matcher": "Bash", "hooks": [{"type": "command", "command": "cat >/dev/null"}]}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [shell]}}))
    operator = root / "operator.json"
    operator.write_text(json.dumps({"packs": PACKS}))
    argv = [HOOKRUNNER, "claude", "install", "--workspace", str(root / "ws")]
    done = subprocess.run(
        [*argv, "--ax-config", str(operator)], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"install failed: {done.stderr[-500:]}")
    document = json.loads(settings.read_text())
    return str(document["hooks"]["PreToolUse"][0]["hooks"][0]["command"])


def _one(label: str, cc: str | None, calls: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"bench-claudehook-{label}-"))
    run_dir = Path(tempfile.mkdtemp(prefix="hr-"))  # short: a socket path's limit
    (root / "ws").mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home"),
           "XDG_RUNTIME_DIR": str(run_dir)}  # fmt: skip
    if cc is not None:
        env["CC"] = cc
    try:
        command = _installed(root, env)
        payload = json.dumps(
            {"session_id": "bench", "transcript_path": str(root / "t.jsonl"),
             "cwd": str(root / "ws"), "permission_mode": "default",
             "hook_event_name": "PreToolUse", "tool_name": "Bash",
             "tool_input": {"command": "ls -la"}, "tool_use_id": "toolu_bench"}
        ).encode()  # fmt: skip
        hook = checked_call(["/bin/sh", "-c", command], env, root / "ws", _allowed, payload)
        hook()  # the first call starts the warm runner
        sockets = list(run_dir.glob("hookrunner-*/fire-*.sock"))
        if not sockets or server_pid(sockets[0]) is None:
            raise RuntimeError("no warm runner answered after the first call")
        bare = checked_call(["/bin/sh", "-c", "true"], env, root / "ws", _allowed, payload)
        result = _pair(hook, bare, calls)
        server = server_pid(sockets[0])
        result["cpu_ms_per_call"] = {
            "runner": cpu_ms(hook, calls, server),
            "bare": cpu_ms(bare, calls),
        }
        result["client"] = command.split()[0]
        return result
    finally:
        stop_warm_runners(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def measure(calls: int = 200) -> dict[str, Any]:
    results: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    results["c_client"] = _one("c", None, calls)
    results["python_client"] = _one("py", "/nonexistent/cc", calls)
    results["loadavg_after"] = os.getloadavg()
    results["packs"] = PACKS
    return results


def lines(section: dict[str, Any], grid: Callable[..., list[str]] | None = None) -> list[str]:
    out = ["Scenario 11: a Claude Code hook call, installed (two packs, one shell hook; ms)"]
    out.append(
        "client          call median  p90    bare sh -c true median  overhead  CPU/call (bare)"
    )
    for key in ("c_client", "python_client"):
        one = section[key]
        cpu = one["cpu_ms_per_call"]
        out.append(
            f"{key:<15} {one['runner']['median_ms']:11.1f}  {one['runner']['p90_ms']:5.1f}"
            f"  {one['bare']['median_ms']:22.1f}  {one['overhead_ms']:8.1f}"
            f"  {cpu['runner']:8.1f} ({cpu['bare']:.1f})"
        )
    out.append(load_line(section))
    return out


def main(argv: list[str]) -> int:
    return paired.main(__doc__, measure, lines, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
