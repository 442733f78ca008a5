"""Optional (`--profile`): where a proxy spends its CPU under load, sampled with py-spy.

py-spy samples every thread of the running proxy (`--nonblocking`, so the proxy is
never paused) while hey drives one workload. From the collapsed stacks:
* `self` shares: the innermost Python frame of each sample, grouped by who owns
  the code (our `addons/` and `proxy/`, mitmproxy, the standard library, other
  third-party packages) and listed by function;
* `under_ours`: samples with one of our frames (other than the entry point, under
  which everything runs) anywhere on the stack: our hooks and everything they
  call, grouped by the owner of the innermost frame;
* `getaddrinfo`: samples in `socket.getaddrinfo` (executor threads), whoever asked.

py-spy comes from PyPI into a throwaway venv under bench-results/.tools (or
`$PY_SPY`, or one on PATH); nothing is added to the project's .venv.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.allowlist import TARGET
from bench.throughput import Target, Workload

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
OURS = ("addons/", "proxy/", "runtime/", "hookrunner/", "common/")
PACKAGE = "sandbox_egress/"  # frames name the import package's path (D140)
# Our entry point: every sample of the event loop sits under it, so it is not "our work".
ENTRY = ("runtime/cli.py", "runtime/launcher.py")
STDLIB_PREFIXES = (
    "asyncio/",
    "concurrent/",
    "json/",
    "logging/",
    "email/",
    "http/",
    "importlib/",
    "<frozen",
    "<string>",
)


def ensure_py_spy(tools: Path) -> Path:
    for candidate in (os.environ.get("PY_SPY"), shutil.which("py-spy")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    venv = tools / "venv"
    binary = venv / "bin" / "py-spy"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "py-spy"],
            check=True,
            timeout=600,
        )
    return binary


def owner(frame: str) -> str:
    match = _FRAME.match(frame)
    path = (match.group("file") if match else frame).removeprefix(PACKAGE)
    if path.startswith(ENTRY):
        return "ours: entry point"
    if path.startswith(OURS):
        return "ours"
    if path.startswith("mitmproxy"):
        return "mitmproxy"
    if path.startswith(STDLIB_PREFIXES) or ("/" not in path and path.endswith(".py")):
        return "stdlib"
    if not path:
        return "native (no Python frame)"
    return "third-party: " + path.split("/", 1)[0]


def function(frame: str) -> str:
    """The frame without its line number: `func (file)`."""
    match = _FRAME.match(frame)
    return f"{match.group('func')} ({match.group('file')})" if match else frame


# Innermost frames of a thread that waits, not works: py-spy (without --idle) still
# samples a thread blocked in these, since it cannot tell a lock wait from work. The
# audit writer waits in `Condition.wait`, an executor's idle worker in `_worker`.
IDLE_LEAVES = ("wait (threading.py", "Condition.wait (threading.py", "_worker (concurrent/futures")


def analyse(raw: Path, top: int = 15) -> dict[str, Any]:
    self_owner: collections.Counter[str] = collections.Counter()
    self_function: collections.Counter[str] = collections.Counter()
    ours_inclusive: collections.Counter[str] = collections.Counter()
    under_ours_by_owner: collections.Counter[str] = collections.Counter()
    total = under_ours = resolver = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        leaf = frames[-1]
        if leaf.startswith(IDLE_LEAVES):
            idle += count
            continue
        total += count
        self_owner[owner(leaf)] += count
        self_function[function(leaf)] += count
        mine = [f for f in frames if owner(f) == "ours"]
        if mine:
            under_ours += count
            under_ours_by_owner[owner(leaf)] += count
            for name in {function(f) for f in mine}:
                ours_inclusive[name] += count
        if any(f.startswith("getaddrinfo (socket.py") for f in frames):
            resolver += count

    def share(n: int) -> float:
        return n / total if total else 0.0

    return {
        "samples": total,
        "idle_samples": idle,
        "self_by_owner": {k: share(v) for k, v in self_owner.most_common()},
        "self_top": [
            {"function": k, "owner": owner(k), "share": share(v)}
            for k, v in self_function.most_common(top)
        ],
        "under_ours": share(under_ours),
        "under_ours_by_owner": {k: share(v) for k, v in under_ours_by_owner.most_common()},
        "ours_inclusive_top": [
            {"function": k, "share": share(v)} for k, v in ours_inclusive.most_common(top)
        ],
        "getaddrinfo": share(resolver),
    }


def profile(
    prefix: list[str],
    py_spy: Path,
    target: Target,
    workload: Workload,
    seconds: float,
    concurrency: int,
    out_dir: Path,
) -> dict[str, Any]:
    assert target.pid is not None and target.proxy is not None
    raw = out_dir / f"profile-{target.name}-{workload.key}.txt"
    argv = [*prefix, "hey", "-z", f"{seconds + 3}s", "-c", str(concurrency), "-x", target.proxy]
    if not workload.keepalive:
        argv.append("-disable-keepalive")
    argv.append(f"{workload.scheme}://{TARGET}/")
    with open(out_dir / f"profile-{target.name}-{workload.key}.hey", "wb") as log:
        load = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            time.sleep(1.0)  # let the load reach a steady state before sampling
            subprocess.run(
                [
                    str(py_spy),
                    "record",
                    "--pid",
                    str(target.pid),
                    "--duration",
                    str(int(seconds)),
                    "--rate",
                    "200",
                    "--nonblocking",
                    "--format",
                    "raw",
                    "--output",
                    str(raw),
                ],
                check=True,
                capture_output=True,
                timeout=seconds + 60,
            )
        finally:
            try:
                load.wait(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                load.kill()
                load.wait()
    return {"raw": str(raw), **analyse(raw)}
