"""runtime/trim.py: freed memory is returned once a burst has ended, once (issue 36, D288);
`serve` runs it (D300)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import socket
import sys
import time
import weakref
from collections.abc import Hashable
from pathlib import Path

import pytest

from sandbox_egress.runtime import trim
from testbed import procs


class _Done(Exception):
    pass


def _run(signatures: list[Hashable]) -> list[int]:
    """The ticks (1-based) at which `trim_when_quiet` trimmed, `activity()` returning
    `signatures[0]` at start and `signatures[k]` at tick k."""
    trimmed: list[int] = []
    reads = 0

    def activity() -> Hashable:
        nonlocal reads
        if reads == len(signatures):
            raise _Done
        reads += 1
        return signatures[reads - 1]

    def release() -> int:
        trimmed.append(reads - 1)
        return 1

    with pytest.raises(_Done):
        asyncio.run(trim.trim_when_quiet(activity, release, interval=0))
    return trimmed


@pytest.mark.parametrize(
    ("signatures", "expected"),
    [
        # idle from the start: what start-up freed, once, then nothing
        ([0, 0, 0, 0, 0], [1]),
        # a burst: no trim while the connections change, one when they stop
        ([0, 0, 1, 2, 3, 3, 3, 3], [1, 5]),
        # the burst ends with the same connections as before: still over, still one trim
        ([0, 0, 1, 0, 0, 0], [1, 4]),
        # never quiet: never trimmed
        ([0, 1, 2, 3, 4, 5], []),
    ],
    ids=["idle", "burst", "burst-back-to-same", "busy"],
)
def test_trims_once_per_quiet_period(signatures: list[Hashable], expected: list[int]) -> None:
    assert _run(signatures) == expected


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_glibcs_and_harmless() -> None:
    release = trim.malloc_trim()
    assert release is not None
    kept = [bytearray(64 * 1024) for _ in range(200)]  # 12.5 MiB, then freed
    del kept
    assert release() in (0, 1)
    again = [bytes(1024) for _ in range(100)]  # malloc still works after a trim
    assert len(again) == 100 and release() in (0, 1)


def test_no_trim_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "libc_ver", lambda: ("musl", "1.2"))
    assert trim.malloc_trim() is None


def test_release_collects_the_cycles_then_trims() -> None:
    calls: list[str] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    def fake_trim() -> int:
        calls.append("trim")
        return 1

    gc.disable()  # as in an idle proxy: no allocation reaches the collector's thresholds
    try:
        gc.collect()
        refs = []
        for _ in range(50):
            refs.append(weakref.ref(Cycle()))
        assert all(ref() is not None for ref in refs)  # unreachable, not yet collected
        assert trim.releaser(fake_trim)() >= 50
        assert all(ref() is None for ref in refs) and calls == ["trim"]
        assert trim.releaser(None)() >= 0  # no glibc: the collection alone
    finally:
        gc.enable()


# `egress-proxy run` in a child of its own, `runtime.cli.main` called in-process so that two
# things can be injected before `serve` starts (a stand-in, said so here: a real trim would
# work too, but what it returns cannot be asserted): glibc's `malloc_trim` is replaced by a
# fake that writes one line per call to stdout, and the quiet interval is 0.3 s instead of
# 5 s. Everything else is the real `serve`: the real releaser (with a callback on the
# collector recording each full collection it ran) and the real `trim_when_quiet` task.
SERVE_WITH_A_FAKE_TRIM = """
import asyncio, gc, json, sys
from sandbox_egress.runtime import trim
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)

def fake_malloc_trim():
    def fake():
        task = asyncio.current_task()
        print(json.dumps({"trim": task.get_name() if task else None, "collections": len(full)}), flush=True)
        return 1
    return fake

trim.malloc_trim = fake_malloc_trim
real = trim.trim_when_quiet

def quick(activity, release, interval=trim.TRIM_INTERVAL_S):
    return real(activity, release, 0.3)

trim.trim_when_quiet = quick
from sandbox_egress.runtime import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lines(child: procs.Child) -> list[dict[str, object]]:
    text = child.stdout.read_text() if child.stdout.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_serve_starts_the_trim_task_and_it_releases_after_a_burst(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: api.example.test\n")
    listen = _free_port()
    argv = [sys.executable, "-O", "-c", SERVE_WITH_A_FAKE_TRIM, "run", "--config", str(config)]
    argv += ["--listen", f"127.0.0.1:{listen}", "--metrics", f"127.0.0.1:{_free_port()}"]
    argv += ["--certs", str(tmp_path / "certs"), "--audit-log", str(tmp_path / "audit.log")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONOPTIMIZE"}
    child = procs.start("egress-proxy", argv, tmp_path, env=env)
    try:
        # Started and running: the first quiet interval after start releases what start-up
        # freed, from the task `serve` named "trim".
        procs.wait_until("the first release", lambda: len(_lines(child)) >= 1, 60, child)
        first = _lines(child)[0]
        assert first["trim"] == "trim" and int(str(first["collections"])) >= 1
        time.sleep(1.0)  # idle: no second release while nothing changes
        assert len(_lines(child)) == 1
        # A burst: five connections opened (each refused 403) and held; once the set of
        # open connections stops changing, a release; they close: the set changed, and
        # once it stops changing again, another. (Under load, opening them may span more
        # than one interval and release in between: counted as "at least".)
        held = [socket.create_connection(("127.0.0.1", listen), timeout=10) for _ in range(5)]
        for sock in held:
            sock.sendall(b"GET http://refused.example/ HTTP/1.1\r\nHost: refused.example\r\n\r\n")
            assert sock.recv(12) == b"HTTP/1.1 403"
        procs.wait_until(
            "a release with the burst held", lambda: len(_lines(child)) >= 2, 30, child
        )
        opened = len(_lines(child))
        for sock in held:
            sock.close()
        procs.wait_until("a release once closed", lambda: len(_lines(child)) > opened, 30, child)
        time.sleep(1.0)  # idle again: no further release
        releases = _lines(child)
        assert len(releases) == opened + 1
        # Each from the task "trim", each after a full collection of the releaser's own.
        assert {each["trim"] for each in releases} == {"trim"}
        counts = [int(str(each["collections"])) for each in releases]
        assert counts == sorted(set(counts)) and counts[0] >= 1
    finally:
        child.stop()
