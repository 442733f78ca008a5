"""The production proxy runs under `python -O` (D75), and the project's invariants survive it.

* The `egress-proxy run` console script re-executes itself (same pid) with
  `PYTHONOPTIMIZE=1`, so mitmproxy's `if __debug__` checks are off; its banner says so.
* An operator's own `PYTHONOPTIMIZE=0` is obeyed: the checks stay on.
* No `assert` statement in production code (`-O` would strip it), and an invariant of
  ours still raises `InvariantError` under `-O`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import procs
from tests.product import PRODUCT

REPO = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).parent / "egress-proxy"
CONFIG = "network:\n  allowlist:\n    - domain: api.example.test\n"


def _asserts(folder: str) -> Iterator[str]:
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert):
                yield f"{path.relative_to(REPO)}:{node.lineno}"


def test_production_code_has_no_assert_statement() -> None:
    found = [where for folder in PRODUCT for where in _asserts(folder)]
    assert found == []


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_proxy(tmp_path: Path, extra_env: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """Start the console script; return its banner, its /proc cmdline and environment."""
    config = tmp_path / "env.yaml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONOPTIMIZE"} | extra_env
    argv = [str(CONSOLE_SCRIPT), "run", "--config", str(config)]
    argv += ["--listen", f"127.0.0.1:{_free_port()}", "--metrics", f"127.0.0.1:{_free_port()}"]
    argv += ["--certs", str(tmp_path / "certs"), "--audit-log", str(tmp_path / "audit.log")]
    child = procs.start("egress-proxy", argv, tmp_path, env=env)
    try:
        procs.wait_until(
            "the banner's last line",
            lambda: "debug-only checks" in child.stderr.read_text(),
            timeout=60,
            child=child,
        )
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
        raw_env = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
        environ = dict(e.decode().partition("=")[::2] for e in raw_env if b"=" in e)
        banner = child.stderr.read_text()
    finally:
        child.stop()
    return banner, " ".join(c.decode() for c in cmdline if c), environ


def test_the_console_script_reexecutes_itself_under_optimization(tmp_path: Path) -> None:
    banner, cmdline, environ = _run_proxy(tmp_path, {})
    assert "egress-proxy: python -O (optimize level 1): debug-only checks off" in banner
    # The same pid now runs `python -m sandbox_egress.runtime.cli run ...` with the variable set.
    assert cmdline.startswith(f"{sys.executable} -m sandbox_egress.runtime.cli run --config ")
    assert environ["PYTHONOPTIMIZE"] == "1"


def test_an_operators_pythonoptimize_0_keeps_the_checks_on(tmp_path: Path) -> None:
    banner, cmdline, environ = _run_proxy(tmp_path, {"PYTHONOPTIMIZE": "0"})
    assert "egress-proxy: python without -O: debug-only checks on" in banner
    assert cmdline.startswith(f"{sys.executable} {CONSOLE_SCRIPT} run --config ")
    assert environ["PYTHONOPTIMIZE"] == "0"


INVARIANT = """
import sys
from sandbox_egress.proxy.hosts import Host
from sandbox_egress.common.invariant import InvariantError

assert False, "stripped"  # proves this interpreter runs with -O
host = Host(name="api.example.test", ip=None)
object.__setattr__(host, "name", None)  # a state Host rules out
try:
    str(host)
except InvariantError as exc:
    print(f"optimize={sys.flags.optimize} InvariantError: {exc}")
"""


@pytest.mark.parametrize("flag", ["-O", "-OO"])
def test_an_invariant_of_ours_still_raises_under_optimization(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, flag, "-c", INVARIANT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    level = flag.count("O")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"optimize={level} InvariantError: a Host has exactly one of name and ip\n"
    )
