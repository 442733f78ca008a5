"""runtime/engine/idlewaiters.py (D307): a deque in use is left alone, asyncio uses the waiters
only as a list can be used (pinned in its source), and a paused writer drains with its
waiters in a list over a real socket pair. The through-the-engine check is in
tests/runtime/test_idleconn.py.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import re
import socket
from typing import Any

from sandbox_egress.runtime.engine import idlewaiters


def test_a_deque_with_a_waiter_or_no_deque_is_left_alone() -> None:
    class Owner:
        _drain_waiters: Any = collections.deque(["waiting"])

    writer = type("Writer", (), {"_protocol": Owner()})()
    assert not idlewaiters.lighten_writer(writer)
    assert list(Owner._drain_waiters) == ["waiting"]
    assert not idlewaiters.lighten_writer(object())
    assert not idlewaiters.lighten_watchdog(object())


def test_asyncio_uses_the_waiters_only_as_a_list_can_be_used() -> None:
    # What lighten_* relies on: append, remove, iteration, truth and len, nothing else.
    streams = inspect.getsource(asyncio.streams.FlowControlMixin)
    uses = set(re.findall(r"self\._drain_waiters(\.\w+|\W)", streams))
    assert uses <= {".append", ".remove", ":", " ", "\n", ")"}, uses
    event = inspect.getsource(asyncio.Event)
    uses = set(re.findall(r"self\._waiters(\.\w+|\W)", event))
    assert uses <= {".append", ".remove", ":", " ", "\n", ")"}, uses


async def _drain_through_a_paused_transport() -> bytes:
    """A writer paused above its high-water mark waits in `drain` (its waiter in the list)
    until the peer reads; what the peer reads is what was written."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=ours)
    assert idlewaiters.lighten_writer(writer)
    writer.transport.set_write_buffer_limits(high=1024, low=0)
    sent = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes at once
    writer.write(sent)
    draining = asyncio.ensure_future(writer.drain())
    await asyncio.sleep(0)
    assert not draining.done() and len(writer._protocol._drain_waiters) == 1  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    got = bytearray()
    while len(got) < len(sent):
        got += await loop.sock_recv(theirs, 65536)
    await asyncio.wait_for(draining, 10)
    waiters = writer._protocol._drain_waiters  # type: ignore[attr-defined]
    writer.close()
    theirs.close()
    assert type(waiters) is list and not waiters
    return bytes(got)


def test_a_paused_writer_drains_with_its_waiters_in_a_list() -> None:
    assert asyncio.run(_drain_through_a_paused_transport()) == bytes(range(256)) * 4096
