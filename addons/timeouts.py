"""Upstream timeouts: a connection not made, or an answer not begun, in time is the
product's `504 upstream_timeout` (docs/configuration.md#when-the-proxy-fails,
D353).

mitmproxy waits for an upstream without a deadline of its own: a connect ends when the
kernel gives up on its SYNs (about two minutes), an answer that never begins when
`tcp_timeout` (600 s of silence) closes the client's whole connection, unanswered.

* connect (`--upstream-connect-timeout`): mitmproxy's connection handler calls
  `asyncio.open_connection` by the name `asyncio` of `mitmproxy.proxy.server`; `install`
  gives that module a stand-in for `asyncio` whose `open_connection` has the deadline
  and raises `TimeoutError("connect timed out after N s")` — an `OSError`, which
  mitmproxy reports as the connect's failure (`upstream_timeout`, `proxy.failures`).
  Everything else of the stand-in is `asyncio` itself.
* answer (`--upstream-timeout`): once an allowed request is whole (the `request` hook:
  its body read, or streamed to its end), its answer head must begin within the bound.
  One sweep task per process looks at the requests waiting, once a second; no timer per
  request. An overdue one is marked on its flow and its upstream connection is reset
  (once it has one open: one still connecting is reset by a later sweep, D686):
  mitmproxy then sees the upstream close before the answer, and `addons.upstream`
  answers `504 upstream_timeout` (an HTTP/2 upstream connection carries the other
  streams on it too: they fail `upstream_reset`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import types
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import server

from sandbox_egress.addons import mitm
from sandbox_egress.addons.shared import FLOW_KEY, FlowState
from sandbox_egress.proxy.failures import TIMED_OUT

log = logging.getLogger("egress")

TIMED_OUT_KEY = "egress.upstream_timed_out"  # flow.metadata: the answer's deadline passed
CONNECT_TIMEOUT_S = 30.0
ANSWER_TIMEOUT_S = 300.0
SWEEP_S = 1.0


class _TimedAsyncio(types.ModuleType):
    """`asyncio` for `mitmproxy.proxy.server`: its `open_connection` has a deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__("asyncio")
        self.seconds = seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def open_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(self.seconds):
                return await asyncio.open_connection(*args, **kwargs)
        except TimeoutError as exc:
            raise TimeoutError(f"connect {TIMED_OUT} after {self.seconds:g} s") from exc


def install(connect_s: float) -> None:
    """Give mitmproxy's connection handler the connect deadline (0: none)."""
    server.asyncio = _TimedAsyncio(connect_s) if connect_s > 0 else asyncio


class Timeouts:
    """The addon: the connect deadline, and the sweep of answers not begun in time."""

    def __init__(self, connect_s: float = CONNECT_TIMEOUT_S, answer_s: float = ANSWER_TIMEOUT_S):
        self.connect_s = connect_s
        self.answer_s = answer_s
        self._waiting: dict[str, tuple[float, http.HTTPFlow]] = {}  # flow id -> deadline
        self._sweep: asyncio.Task[None] | None = None

    def load(self, _loader: object) -> None:
        install(self.connect_s)

    def running(self) -> None:
        if self.answer_s > 0 and self._sweep is None:
            self._sweep = asyncio.get_running_loop().create_task(self._sweeping())

    def done(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def request(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.get(FLOW_KEY)
        waits = flow.response is None and flow.error is None
        if self.answer_s > 0 and state is not None and state.decision.allowed and waits:
            self._waiting[flow.id] = (time.monotonic() + self.answer_s, flow)

    async def _sweeping(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> None:
        """Forget answered and ended requests; reset the upstream of an overdue one."""
        for key, (deadline, flow) in list(self._waiting.items()):
            if flow.response is not None or flow.error is not None or not flow.live:
                del self._waiting[key]
            elif now >= deadline:
                flow.metadata[TIMED_OUT_KEY] = True
                if _reset_upstream(flow):
                    del self._waiting[key]
                    log.debug("no answer within %g s: the upstream connection reset", self.answer_s)
                # else no open connection yet (still connecting, or D680's second one):
                # the next sweep resets it once it is open (D686); a connect that fails
                # ends the flow, which the first branch forgets.


def _reset_upstream(flow: http.HTTPFlow) -> bool:
    """Abort the socket of `flow`'s upstream connection (mitmproxy's table, as
    `workarounds.hang_up` reads it): whether an open one was aborted. Nothing happens
    if the table changed shape (and then the sweep forgets the flow)."""
    with contextlib.suppress(AttributeError, LookupError, RuntimeError):
        proxyserver = mitm.addon("proxyserver")
        handler = proxyserver.connections.get(flow.client_conn.id) if proxyserver else None
        io = handler.transports.get(flow.server_conn) if handler else None
        if io is not None and io.writer is not None and not io.writer.transport.is_closing():
            io.writer.transport.abort()
            return True
        return handler is None  # the client is gone: nothing left to reset
    return True
