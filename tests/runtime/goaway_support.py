"""The harness of the GOAWAY drain's layer tests (tests/runtime/test_goaway.py,
test_goaway_attack.py; runtime/engine/goaway.py, D701, D710-D711): a real mitmproxy
`Http2Client` and h2 to an upstream whose frames the test writes raw (`Upstream`), no
network; the fixtures `tctx` (mitmproxy's test context) and `patched` (the drain installed,
the replaced methods restored after the test); the upstream's frames `goaway_frame` and
`status_200`. The fixtures are function-scoped: each importing module uses them by name.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import h2.connection
import pytest
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers import http as http_layers
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestEndOfMessage, RequestHeaders, ResponseData
from mitmproxy.test import taddons, tflow

from sandbox_egress.runtime.engine import goaway
from testbed.h2script import GOAWAY, SETTINGS, frame, headers

NO_ERROR = 0
REPLACED = [
    (h2.connection.H2Connection, "_receive_goaway_frame"),
    (_http2.Http2Client, "handle_h2_event"),
    (_http2.Http2Client, "_handle_event"),
    (_http2.Http2Client, "close_connection"),
    (http_layers.GetHttpConnection, "connection_spec_matches"),
]


@pytest.fixture
def patched() -> Iterator[None]:
    saved = [(owner, name, owner.__dict__.get(name)) for owner, name in REPLACED]
    goaway.install()
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def goaway_frame(last: int, error: int = NO_ERROR) -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last, error))


def status_200(stream: int) -> bytes:
    return headers(stream, [(":status", "200")])


class Upstream:
    """An `Http2Client` to an upstream whose frames the test writes; what it hands on."""

    def __init__(self, tctx: Any) -> None:
        ctx = context.Context(tflow.tclient_conn(), tctx.options)
        ctx.server = tflow.tserver_conn()
        ctx.server.state = ConnectionState.OPEN
        self.server = ctx.server
        self.client = _http2.Http2Client(ctx)
        self.handed: list[Any] = []  # the HTTP events handed to the HTTP layer
        self.closed = False
        self.run(events.Start())
        self.run(events.DataReceived(ctx.server, frame(SETTINGS, 0, 0)))

    def run(self, event: events.Event) -> None:
        for command in self.client.handle_event(event):
            if isinstance(command, ReceiveHttp):
                self.handed.append(command.event)
            elif isinstance(command, commands.CloseConnection):
                self.closed = True

    def request(self, stream_id: int) -> None:
        request = http.Request.make("GET", "https://upstream.test/p")
        self.run(RequestHeaders(stream_id, request, end_stream=True))
        self.run(RequestEndOfMessage(stream_id))

    def receive(self, data: bytes) -> None:
        self.run(events.DataReceived(self.server, data))

    def outcome(self) -> list[tuple[str, int, Any]]:
        """(event, stream, what) for each event handed on: a body's bytes, an error's text."""
        return [
            (
                type(e).__name__,
                e.stream_id,
                e.data if isinstance(e, ResponseData) else getattr(e, "message", None),
            )
            for e in self.handed
        ]


@pytest.fixture
def tctx() -> Iterator[Any]:
    with taddons.context(Proxyserver()) as tctx:
        yield tctx
