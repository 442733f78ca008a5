"""The guard's broker ends with its namespace, also in ``fire``'s lasting one (D375, D381).

``exec``'s namespace has a PID namespace or a cgroup that ends the broker with the
tool; ``fire``'s lasting namespace (no PID namespace: background runs outlive the
command) has neither, so the broker leaves once nothing else shares its mount
namespace, and serves while a background process still could run git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import toolns


@pytest.fixture
def guard() -> Iterator[toolns.Guard]:
    made = toolns._make_guard("/usr/bin:/bin")
    assert made is not None
    try:
        yield made
    finally:
        toolns.remove_guard(Path(made.directory))


def brokers(guard: toolns.Guard) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                    words = cmdline.read().split(b"\0")
            except OSError:
                continue
            if os.fsencode(os.path.join(guard.directory, "gitbroker.py")) in words:
                found.append(int(name))
    return found


def wait_for(what: str, ready: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.privileged
def test_the_broker_of_a_lasting_namespace_leaves_after_its_last_process(
    guard: toolns.Guard, tmp_path: Path
) -> None:
    tools = toolns.programs()
    assert tools is not None and shutil.which("git")
    tmp_path.chmod(0o777)
    marker = str(tmp_path / "later")
    code = f"git --version; (sleep 2; git --version > {marker}) & exit 0"
    argv = toolns.namespace_argv(
        ["sh", "-c", code], guard.binds(), guard.read_only(), None, tools, guard, lasting=True
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout[:12]) == (0, "git version "), done.stderr
    assert brokers(guard), "the broker left while a background process could still run git"
    wait_for(
        "the background git ran", lambda: os.path.exists(marker) and os.path.getsize(marker), 20
    )
    with open(marker) as later:
        assert later.read().startswith("git version")
    wait_for("the broker left", lambda: not brokers(guard), 20)
