"""A mitmproxy layer makes its queue of paused events only when one arrives (D163)."""

from __future__ import annotations

import collections
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mitmproxy
import pytest
from mitmproxy import connection, options
from mitmproxy.proxy import commands, context, events, layer

from sandbox_egress.runtime.engine import layerqueues


def uninstall() -> None:
    layer.Layer.__init__ = layerqueues.ORIGINAL_INIT  # type: ignore[method-assign]
    if "_paused_event_queue" in layer.Layer.__dict__:
        del layer.Layer._paused_event_queue


@pytest.fixture
def lazy() -> Iterator[None]:
    installed = layer.Layer.__init__ is not layerqueues.ORIGINAL_INIT  # by a LeanMaster
    layerqueues.install()
    yield
    if not installed:
        uninstall()


@pytest.fixture(params=[False, True], ids=["mitmproxy", "lazy"])
def either(request: pytest.FixtureRequest) -> Iterator[None]:
    installed = layer.Layer.__init__ is not layerqueues.ORIGINAL_INIT  # by a LeanMaster
    if request.param:
        layerqueues.install()
    else:
        uninstall()
    yield
    if installed:
        layerqueues.install()
    else:
        uninstall()


def test_what_mitmproxy_does_with_the_queue() -> None:
    """Every use of the attribute in the installed mitmproxy: the stand-in covers these."""
    root = Path(mitmproxy.__file__).parent
    uses = sorted(
        (path.relative_to(root).as_posix(), line.strip())
        for path in root.rglob("*.py")
        for line in path.read_text().splitlines()
        if "_paused_event_queue" in line
    )
    assert uses == [
        ("proxy/layer.py", "_paused_event_queue: collections.deque[events.Event]"),
        ("proxy/layer.py", "ev = self._paused_event_queue.popleft()"),
        ("proxy/layer.py", "self._paused_event_queue = collections.deque()"),
        ("proxy/layer.py", "self._paused_event_queue.append(event)"),
        ("proxy/layer.py", "while not self._paused and self._paused_event_queue:"),
        ("proxy/layers/http/__init__.py", "for evt in self._paused_event_queue:"),
    ]
    assert re.search(r"\bself\._paused_event_queue = collections\.deque\(\)", inspect.getsource(
        layerqueues.ORIGINAL_INIT
    ))  # fmt: skip


class Pausing(layer.Layer):
    """Waits for one blocking command on start, then records every event it handles."""

    def __init__(self, ctx: context.Context) -> None:
        super().__init__(ctx)
        self.seen: list[Any] = []

    def _handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        if isinstance(event, events.Start):
            yield commands.OpenConnection(self.context.server)
        self.seen.append(event)


def make_context() -> context.Context:
    client = connection.Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2))
    return context.Context(client, options.Options())


def test_a_layer_that_queued_nothing_holds_no_deque(lazy: None) -> None:
    made = Pausing(make_context())
    assert "_paused_event_queue" not in made.__dict__
    queue = made._paused_event_queue
    assert not queue and len(queue) == 0 and list(queue) == []
    with pytest.raises(IndexError):
        queue.popleft()


def test_events_that_arrive_while_paused_are_handled_in_order(either: None) -> None:
    made = Pausing(make_context())
    (opening,) = list(made.handle_event(events.Start()))
    assert isinstance(opening, commands.OpenConnection)
    first = events.DataReceived(made.context.client, b"one")
    second = events.DataReceived(made.context.client, b"two")
    assert list(made.handle_event(first)) == [] and list(made.handle_event(second)) == []
    assert isinstance(made.__dict__["_paused_event_queue"], collections.deque)
    list(made.handle_event(events.OpenConnectionCompleted(opening, None)))
    assert [type(e).__name__ for e in made.seen] == ["Start", "DataReceived", "DataReceived"]
    assert [e.data for e in made.seen[1:]] == [b"one", b"two"]
    assert not made._paused_event_queue
