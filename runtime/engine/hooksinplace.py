"""A layer whose hook finished at once carries on where it paused (issue 36, D314).

A mitmproxy layer that yields a hook pauses: it stores its generator, returns, and waits
for `HookCompleted`, which the connection handler sends later as an event of its own,
from the top of the connection's layer stack down to the paused layer (seven layers on an
intercepted CONNECT). runtime/engine/inlinehooks.py already hands that completion on right after
the event that started the hook when the addons finished without waiting (D294); it is
still a second trip through the whole stack, fourteen per new intercepted connection.

Here the paused layer itself looks, once its hook has gone up and the handler has run it
(the hook's task starts eagerly inside the handler's loop), whether it finished at once;
if so it takes the completion back from the handler's list and resumes exactly as
`handle_event(HookCompleted)` would have (`Layer.__continue`: the generator gets the
hook's reply, `None`, then events that were queued meanwhile): no second trip, no
second lock round. A hook that waited (a lookup, a held body) is answered as before.

What changes: only when the layer's next commands come out: right after the hook rather
than after the rest of the current event's commands of the layers above it. A layer
above that notes blocking commands to route their completion (`command_sources` of
`HttpLayer` and of `RawQuicLayer`) gets the note it made for the hook removed, as its
`CommandCompleted` branch would have.
tests/runtime/test_hooksinplace.py pins mitmproxy's `handle_event`, `__process` and the
HTTP layer's routing this copies.
"""

from __future__ import annotations

from typing import Any

from mitmproxy.proxy import commands, events, layer

# The attribute a hook finished at once carries: the handler's list of completions to hand
# on, from which the layer takes it back (runtime/engine/inlinehooks.py sets it).
DONE = "_egress_done_inline"

ORIGINAL_HANDLE_EVENT = layer.Layer.handle_event
ORIGINAL_PROCESS = layer.Layer._Layer__process  # type: ignore[attr-defined]


def _answered(owner: layer.Layer, command: commands.Command) -> events.HookCompleted | None:
    """The completion of `command` if its hook finished while it was handed up, taken
    back from the handler (it will not be sent as an event)."""
    if not isinstance(command, commands.StartHook):
        return None
    waiting = command.__dict__.pop(DONE, None)
    if waiting is None:
        return None
    waiting.remove(command)
    for above in owner.context.layers:
        routes = getattr(above, "command_sources", None)  # HttpLayer's, RawQuicLayer's
        if routes is not None:
            routes.pop(command, None)
    return events.HookCompleted(command)


def handle_event(self: layer.Layer, event: events.Event) -> layer.CommandGenerator[None]:
    # mitmproxy 12's `Layer.handle_event`, line for line, with the two lines marked (D314).
    if self._paused:
        # did we just receive the reply we were waiting for?
        pause_finished = (
            isinstance(event, events.CommandCompleted) and event.command is self._paused.command
        )
        if self.debug is not None:
            yield self._Layer__debug(f"{'>>' if pause_finished else '>!'} {event}")  # type: ignore[attr-defined]
        if pause_finished:  # mitmproxy's `assert isinstance(event, CommandCompleted)`: -O strips it
            yield from self._Layer__continue(event)  # type: ignore[attr-defined]
        else:
            self._paused_event_queue.append(event)
    else:
        if self.debug is not None:
            yield self._Layer__debug(f">> {event}")  # type: ignore[attr-defined]
        command_generator = self._handle_event(event)
        send = None

        # inlined copy of __process to reduce call stack.
        try:
            command = command_generator.send(send)
        except StopIteration:
            return

        while True:
            if self.debug is not None:  # noqa: SIM102  (mitmproxy's shape, pinned)
                if not isinstance(command, commands.Log):
                    yield self._Layer__debug(f"<< {command}")  # type: ignore[attr-defined]
            if command.blocking is True:
                command.blocking = self
                self._paused = layer.Paused(command, command_generator)
                yield command
                if (completed := _answered(self, command)) is not None:  # D314
                    yield from self._Layer__continue(completed)  # type: ignore[attr-defined]  # D314
                return
            else:
                yield command
                try:
                    command = next(command_generator)
                except StopIteration:
                    return


def _process(
    self: layer.Layer, command_generator: layer.CommandGenerator[Any], send: Any = None
) -> layer.CommandGenerator[None]:
    # mitmproxy 12's `Layer.__process`, line for line, with the two lines marked (D314).
    try:
        command = command_generator.send(send)
    except StopIteration:
        return

    while True:
        if self.debug is not None:  # noqa: SIM102  (mitmproxy's shape, pinned)
            if not isinstance(command, commands.Log):
                yield self._Layer__debug(f"<< {command}")  # type: ignore[attr-defined]
        if command.blocking is True:
            command.blocking = self
            self._paused = layer.Paused(command, command_generator)
            yield command
            if (completed := _answered(self, command)) is not None:  # D314
                yield from self._Layer__continue(completed)  # type: ignore[attr-defined]  # D314
            return
        else:
            yield command
            try:
                command = next(command_generator)
            except StopIteration:
                return


def install() -> None:
    """Layers carry on in place after a hook that finished at once (idempotent)."""
    layer.Layer.handle_event = handle_event  # type: ignore[method-assign]
    layer.Layer._Layer__process = _process  # type: ignore[attr-defined]
