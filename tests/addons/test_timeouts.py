"""Upstream timeouts (addons/timeouts.py): the connect deadline given to mitmproxy's
connection handler, and the sweep of answers not begun in time. End to end in
tests/e2e/test_upstream_failures_e2e.py (a silent upstream, dropped SYNs)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from mitmproxy.proxy import server
from mitmproxy.test import tflow

from sandbox_egress.addons import timeouts
from sandbox_egress.addons.shared import FLOW_KEY, FlowState
from sandbox_egress.addons.timeouts import TIMED_OUT_KEY
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.failures import classify

ENTRY = parse({"network": {"allowlist": [{"domain": "*.test"}]}}, "e.yaml", {}).allowlist[0]


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    yield
    timeouts.install(0)


def test_the_internals_the_deadline_relies_on_are_where_they_were() -> None:
    source = inspect.getsource(server.ConnectionHandler.open_connection)
    assert "await asyncio.open_connection(" in source
    assert "except (OSError, asyncio.CancelledError) as e:" in source
    assert "err = str(e)" in source


def test_a_connect_over_its_deadline_fails_as_a_timed_out_oserror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def never(*_args: Any, **_kwargs: Any) -> None:
        await asyncio.sleep(60)

    monkeypatch.setattr(asyncio, "open_connection", never)
    timeouts.install(0.05)
    shim = server.asyncio  # type: ignore[attr-defined]
    assert shim.Semaphore is asyncio.Semaphore  # everything else is asyncio itself

    async def connect() -> None:
        await shim.open_connection("198.18.1.2", 9)

    with pytest.raises(OSError) as raised:
        asyncio.run(connect())
    assert str(raised.value) == "connect timed out after 0.05 s"
    assert classify("CONNECT_FAILED", str(raised.value)) is Reason.UPSTREAM_TIMEOUT
    timeouts.install(0)
    assert server.asyncio is asyncio  # type: ignore[attr-defined]


def _flow(allowed: bool = True) -> Any:
    flow = tflow.tflow()
    flow.response = None
    decision = Decision.allow(ENTRY) if allowed else Decision.deny(Reason.NOT_ALLOWLISTED)
    flow.metadata[FLOW_KEY] = FlowState(decision, "api.test")
    return flow


def test_the_sweep_resets_only_the_overdue_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    reset: list[Any] = []
    monkeypatch.setattr(timeouts, "_reset_upstream", lambda flow: reset.append(flow) or True)
    addon = timeouts.Timeouts(connect_s=5, answer_s=2)
    slow, answered, refused = _flow(), _flow(), _flow(allowed=False)
    for flow in (slow, answered, refused):
        addon.request(flow)
    assert set(addon._waiting) == {slow.id, answered.id}  # a refusal waits for nothing
    answered.response = tflow.tresp()
    deadline = addon._waiting[slow.id][0]
    addon.sweep(deadline - 0.5)
    assert set(addon._waiting) == {slow.id} and reset == []
    addon.sweep(deadline)
    assert reset == [slow] and slow.metadata[TIMED_OUT_KEY] is True
    assert addon._waiting == {}
    assert TIMED_OUT_KEY not in answered.metadata


def test_no_answer_timeout_keeps_nothing() -> None:
    addon = timeouts.Timeouts(connect_s=0, answer_s=0)
    addon.request(_flow())
    assert addon._waiting == {}


def test_an_overdue_answer_without_a_connection_yet_is_reset_once_it_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """D686: the deadline passing while the upstream connection is still being opened (a
    slow connect, or D680's second sending) found nothing to reset and forgot the request:
    the connection, once open, waited for its answer without a deadline."""
    opened: list[bool] = [False]
    reset: list[Any] = []

    def reset_if_open(flow: Any) -> bool:
        if opened[0]:
            reset.append(flow)
        return opened[0]

    monkeypatch.setattr(timeouts, "_reset_upstream", reset_if_open)
    addon = timeouts.Timeouts(connect_s=30, answer_s=2)
    slow = _flow()
    addon.request(slow)
    deadline = addon._waiting[slow.id][0]
    addon.sweep(deadline)  # still connecting: nothing to reset yet
    assert slow.metadata[TIMED_OUT_KEY] is True and reset == []
    assert set(addon._waiting) == {slow.id}
    opened[0] = True
    addon.sweep(deadline + 1)
    assert reset == [slow] and addon._waiting == {}
