"""`addons.workarounds.relay`: the loop that drives a wrapped layer method's commands.

A layer method is driven by its caller with `send(reply)`: the relay must hand every
reply back to the command it answers, replace only what `instead` names, and end where
`inner` ends (or, with `last`, where the replacement is). Fake commands stand in for a
layer's (mitmproxy's `RequestWakeup` carries a distinguishing number).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
from mitmproxy.proxy.commands import Command, RequestWakeup

from sandbox_egress.addons.layers.workarounds import Commands, relay

REPLACE = 2.0  # the command `instead` replaces


def inner(seen: list[Any], fail: bool = False) -> Commands:
    """Yields wakeups 1, 2, 3 and notes each reply; raises after 2 if `fail`."""
    for delay in (1.0, 2.0, 3.0):
        seen.append((delay, (yield RequestWakeup(delay))))
        if fail and delay == REPLACE:
            raise NotImplementedError("from inner")
    seen.append("end")


def replace_two(command: Command) -> Commands | None:
    if isinstance(command, RequestWakeup) and command.delay == REPLACE:
        return (c for c in [RequestWakeup(20.0), RequestWakeup(21.0)])
    return None


def drive(gen: Generator[Command, Any, bool]) -> tuple[list[float], bool]:
    """Run `gen` as a layer's caller would, replying with `delay * 10` to each command."""
    out: list[float] = []
    reply: Any = None
    while True:
        try:
            command = gen.send(reply)
        except StopIteration as stop:
            return out, stop.value
        assert isinstance(command, RequestWakeup)
        out.append(command.delay)
        reply = command.delay * 10


def nothing(_command: Command) -> None:
    return None


CASES: dict[str, tuple[Callable[[Command], Commands | None], bool, list[float], bool, list[Any]]] = {
    "nothing replaced: every command out, every reply back": (
        nothing, False, [1.0, 2.0, 3.0], True, [(1.0, 10.0), (2.0, 20.0), (3.0, 30.0), "end"],
    ),
    "a command replaced: its reply to inner is None, the rest go on": (
        replace_two, False, [1.0, 20.0, 21.0, 3.0], True, [(1.0, 10.0), (2.0, None), (3.0, 30.0), "end"],
    ),
    "last: the replacement ends the relay and inner is closed": (
        replace_two, True, [1.0, 20.0, 21.0], False, [(1.0, 10.0)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_relay(name: str) -> None:
    instead, last, sent, ended, replies = CASES[name]
    seen: list[Any] = []
    gen = inner(seen)
    assert drive(relay(gen, instead, last=last)) == (sent, ended)
    assert seen == replies
    if last:
        assert gen.gi_frame is None  # closed, not left suspended


def test_what_inner_raises_reaches_the_caller() -> None:
    seen: list[Any] = []
    with pytest.raises(NotImplementedError, match="from inner"):
        drive(relay(inner(seen, fail=True), nothing))
    assert seen == [(1.0, 10.0), (2.0, 20.0)]
