"""Freed memory goes back to the system once the proxy is quiet (issue 36).

glibc's malloc keeps the pages a burst of connections freed in its arenas (each thread's,
and the main heap above its top chunk only): the process's resident size stays at the
burst's peak while it idles. `malloc_trim(0)` returns every whole free page of every
arena. `trim_when_quiet` calls it once a burst has ended: every `interval` seconds it reads
a signature of the proxy's activity (the set of open connections); when the signature
changed at the last tick and not since, the burst is over and it trims, once.

Invariants: at most one trim per `interval`, and none while the signature keeps changing
(no trim in the middle of a burst) or while it stays the same after a trim (an idle
proxy trims once, not every interval); the first quiet interval after start trims what
start-up freed. `malloc_trim()` is None where the C library is not glibc (musl returns
its free pages itself), and the task then is not started. A failed trim is harmless:
malloc_trim only releases pages no allocation uses.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
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
