"""An idle intercepted connection keeps its waiter lists as lists, not deques (issue 36, D307).

asyncio makes a `collections.deque` for each set of waiters: a stream protocol's writers
waiting to drain (`FlowControlMixin._drain_waiters`, one per leg) and an `Event`'s waiters
(`Event._waiters`, mitmproxy's timeout watchdog has one per client connection). An empty
deque is 760 bytes (CPython allocates its first block of 64 slots with it), an empty list
56, and these are nearly always empty: a writer waits only while its transport is paused
above the high-water mark, the watchdog's event only while a hook holds it disarmed. Per
intercepted connection three of them: 2.1 KiB of an idle connection.

`lighten_writer(writer)` and `lighten_watchdog(handler)` replace those deques, while
empty, with empty lists. What asyncio does with them (Python 3.12's `streams.py` and
`locks.py`): `append` a waiter, iterate to wake them, `remove` a waiter when it is done,
truth test and `len` (`Event.__repr__`). A list does each of these as the deque does, in
the same order; the lists stay as short as the deques were (a waiter is removed when its
wait ends). tests/runtime/test_idlewaiters.py pins those uses in the installed asyncio.
A deque holding a waiter is left alone (never the case when a connection starts).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

DRAIN_WAITERS = "_drain_waiters"  # asyncio.streams.FlowControlMixin
EVENT_WAITERS = "_waiters"  # asyncio.locks.Event


def _to_list(owner: Any, attribute: str) -> bool:
    found = getattr(owner, attribute, None)
    if type(found) is not collections.deque or found:
        return False
    setattr(owner, attribute, [])
    return True


def lighten_writer(writer: asyncio.StreamWriter | Any) -> bool:
    """The drain waiters of `writer`'s protocol as a list; whether they were replaced."""
    protocol = getattr(writer, "_protocol", None)
    return protocol is not None and _to_list(protocol, DRAIN_WAITERS)


def lighten_watchdog(handler: Any) -> bool:
    """The waiters of `handler`'s timeout watchdog event (a mitmproxy `ConnectionHandler`)
    as a list; whether they were replaced."""
    watchdog = getattr(handler, "timeout_watchdog", None)
    event = getattr(watchdog, "can_timeout", None)
    return isinstance(event, asyncio.Event) and _to_list(event, EVENT_WAITERS)
