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
from sandbox_egress.proxy.config import parse
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
    monkeypatch.setattr(timeouts, "_reset_upstream", reset.append)
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
