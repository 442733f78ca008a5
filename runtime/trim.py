"""Freed memory goes back to the system once the proxy is quiet (issue 36, D288).

A closed connection can leave reference cycles (its layers, handler and tasks point at
each other) that only the cyclic collector frees, and an idle process allocates nothing,
so the collector's thresholds are never reached; and glibc's malloc keeps the pages a
burst freed in its arenas, so the resident size stays at the burst's peak while the proxy
idles. `trim_when_quiet` runs `releaser(malloc_trim())` once a burst has ended: every
`interval` seconds it reads a signature of the proxy's activity (the set of open
connections); when the signature changed at the last tick and not since, the burst is
over, and it collects the cycles and calls glibc's `malloc_trim(0)`, which returns every
whole free page of every arena.

Invariants: at most one release per `interval`, and none while the signature keeps
changing (none in the middle of a burst) or while it stays the same after a release (an
idle proxy releases once, not every interval); the first quiet interval after start
releases what start-up freed. `malloc_trim()` is None where the C library is not glibc
(musl returns its free pages itself): only the collection runs there. A trim is
harmless: malloc_trim only releases pages no allocation uses.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import platform
from collections.abc import Callable, Hashable

TRIM_INTERVAL_S = 5.0


def malloc_trim() -> Callable[[], int] | None:
    """glibc's `malloc_trim(0)` (1 when it returned memory), or None on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return lambda: int(function(0))


def releaser(trim: Callable[[], int] | None) -> Callable[[], int]:
    """Collect the reference cycles the closed connections left, then `trim` (when not
    None): the number of unreachable objects collected."""

    def release() -> int:
        collected = gc.collect()
        if trim is not None:
            trim()
        return collected

    return release


async def trim_when_quiet(
    activity: Callable[[], Hashable],
    trim: Callable[[], int],
    interval: float = TRIM_INTERVAL_S,
) -> None:
    """Call `trim` once each time `activity()` stops changing for an `interval`."""
    last = activity()
    pending = True  # what start-up freed
    while True:
        await asyncio.sleep(interval)
        now = activity()
        if now != last:
            last, pending = now, True
        elif pending:
            trim()
            pending = False
