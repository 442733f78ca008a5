"""`make try` stopped by a signal removes what it built (D516).

`make try` runs `exec python -m demo.tryout`: closing the terminal (SIGHUP) or `kill`,
`timeout` and service managers (SIGTERM) end that process. Python's default for both
ends it at once, without its `finally`, and its proxy and test upstream run in sessions
of their own: they, the two network namespaces, the veth pair, `/etc/netns/<tag>p` and
the temporary directory (the test CA's and the upstream's keys, the upstream's log of
the requests with the injected credentials) were all left behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.netns

REPO = Path(__file__).resolve().parents[2]


def namespaces() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=15)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def children(parent: int) -> dict[int, str]:
    """pid -> command line of the processes whose parent is `parent`."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                if int(stat.read().rpartition(b")")[2].split()[1]) != parent:
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                found[int(name)] = cmdline.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_during_make_try_leaves_nothing_behind(signum: signal.Signals) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "demo.tryout", "config/default.yaml"],
        cwd=REPO,
        env={**os.environ, "DEMO_API_TOKEN": "try-signal-not-a-secret"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tag = f"egy{child.pid % 100000}"
    started: dict[int, str] = {}
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 90)  # the proxy has started
        assert ready, "make try printed nothing in 90 s"
        assert child.stdout.readline().startswith(b"make try: config/default.yaml against")
        started = children(child.pid)
        assert {f"{tag}p", f"{tag}u"} <= namespaces()
        child.send_signal(signum)
        status = child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    temporary = {word.rsplit("/", 1)[0] for line in started.values() for word in line.split()}
    temporary = {path for path in temporary if "/egress-try-" in path}
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {
        "processes": [pid for pid in started if alive(pid)],
        "namespaces": sorted({f"{tag}p", f"{tag}u"} & namespaces()),
        "/etc/netns": (Path("/etc/netns") / f"{tag}p").exists(),
        "directories": [path for path in temporary if os.path.exists(path)],
    }
    clean_up(left)
    assert status == 128 + signum, child.stderr.read() if child.stderr else ""
    assert len(started) == 2 and temporary, started  # the proxy and the test upstream
    assert left == {"processes": [], "namespaces": [], "/etc/netns": False, "directories": []}


def clean_up(left: dict[str, Any]) -> None:
    """What a failing run left: its two children by pid, its namespaces, its files."""
    for pid in left["processes"]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for namespace in left["namespaces"]:
        subprocess.run(["ip", "netns", "del", namespace], check=False, timeout=15)
        shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
    for path in left["directories"]:
        shutil.rmtree(path, ignore_errors=True)


def test_a_url_with_a_query_string_reaches_make_try_whole() -> None:
    """`make try URL=...?a=1&b=2`: the Makefile put the URL unquoted into the shell, which
    ran `make try` in the background at the `&` and tried the URL cut there (D516)."""
    url = "https://httpbin.org/anything?a=1&b=2"
    done = subprocess.run(
        ["make", "-s", "try", f"URL={url}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "DEMO_API_TOKEN": "try-url-not-a-secret"},
    )
    assert done.returncode == 0, done.stderr
    assert f"allowed?  GET {url} -> 200" in done.stdout.splitlines(), done.stdout
