"""A mitmproxy layer's queue of events that arrived while it was paused, made only when one
does (issue 26, D163).

Every mitmproxy `Layer` makes a `collections.deque` in `__init__` for the events that arrive
while it waits for a blocking command (a hook, a connection being opened). An idle
intercepted connection keeps 14 layers, so 14 deques of 760 bytes each (10.6 KiB), nearly
always empty: a layer queues an event only when one arrives during a pause. `install()`
lets `Layer.__init__` make the deque as before and then drops it; until an event is
queued, the class's `LazyEventQueue` answers for the attribute with an empty queue whose
`append` makes the deque on the layer (after which the layer's own attribute is used, as
before).

Invariants: what mitmproxy does with the queue is `append` (while paused), truth test and
`popleft` (when resumed), iteration (the HTTP layer peeks for a protocol error); the empty
stand-in does each of these as an empty deque does; events keep their order.
tests/proxy/test_layerqueues.py pins those uses in the installed mitmproxy's source.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from mitmproxy.proxy import layer

ATTRIBUTE = "_paused_event_queue"
ORIGINAL_INIT = layer.Layer.__init__


class EmptyEventQueue:
    """What a layer that has queued nothing reads: an empty deque until `append`."""

    __slots__ = ("_layer",)

    def __init__(self, owner: Any) -> None:
        self._layer = owner

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def append(self, event: Any) -> None:
        self._layer.__dict__[ATTRIBUTE] = collections.deque((event,))

    def popleft(self) -> Any:
        raise IndexError("pop from an empty deque")


class LazyEventQueue:
    """The class attribute behind `Layer._paused_event_queue` (a non-data descriptor: once
    a layer holds its own deque, that is what it reads)."""

    def __get__(self, owner: Any, cls: type | None = None) -> Any:
        if owner is None:
            return self
        return EmptyEventQueue(owner)


def _init(self: layer.Layer, context: Any) -> None:
    ORIGINAL_INIT(self, context)
    queue = self.__dict__.get(ATTRIBUTE)
    if queue is not None and not queue:
        del self.__dict__[ATTRIBUTE]


def install() -> None:
    """From now on, layers make their event queue when they first need one (idempotent)."""
    layer.Layer._paused_event_queue = LazyEventQueue()  # type: ignore[assignment]
    layer.Layer.__init__ = _init  # type: ignore[method-assign]
