"""runtime/trim.py: freed memory is returned once a burst has ended, once (issue 36, D288)."""

from __future__ import annotations

import asyncio
import gc
import platform
import weakref
from collections.abc import Hashable

import pytest

from sandbox_egress.runtime import trim


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
