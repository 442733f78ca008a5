"""runtime/engine/interim.py: an upstream's 1xx (but 101) answers are dropped, and the
final answer is the request's (real layer classes, no network; D673)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    RequestEndOfMessage,
    RequestHeaders,
    ResponseData,
    ResponseHeaders,
)
from mitmproxy.test import taddons, tflow

from sandbox_egress.runtime.engine import interim

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.fixture
def patched() -> Iterator[None]:
    saved = _http1.Http1Client.read_headers
    interim.install()
    try:
        yield
    finally:
        _http1.Http1Client.read_headers = saved  # type: ignore[method-assign]


def answers(reads: list[bytes]) -> list[Any]:
    """What `Http1Client` hands on for a GET's answer arriving in `reads`: (status, body
    bytes) per answer head and data, and "closed" when it closes the connection."""
    with taddons.context(Proxyserver()) as tctx:
        ctx = context.Context(tflow.tclient_conn(), tctx.options)
        ctx.server = tflow.tserver_conn()
        ctx.server.state = ConnectionState.OPEN
        client = _http1.Http1Client(ctx)
        seen: list[Any] = []

        def run(generator: Any) -> None:
            for command in generator:
                if isinstance(command, commands.CloseConnection):
                    seen.append("closed")
                elif isinstance(command, ReceiveHttp):
                    if isinstance(command.event, ResponseHeaders):
                        seen.append(command.event.response.status_code)
                    elif isinstance(command.event, ResponseData):
                        seen.append(command.event.data)

        run(client.handle_event(events.Start()))
        request = http.Request.make("GET", "https://upstream.test/p")
        run(client.handle_event(RequestHeaders(1, request, end_stream=True)))
        run(client.handle_event(RequestEndOfMessage(1)))
        for data in reads:
            run(client.handle_event(events.DataReceived(ctx.server, data)))
        return seen


def test_mitmproxy_takes_an_interim_answer_for_the_answer() -> None:
    assert answers([CONTINUE + OK]) == [100, "closed"]
    assert answers([CONTINUE, OK]) == [100, "closed"]
    assert answers([b"\r\n" + OK]) == []  # an empty line taken, the answer left unread


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        pytest.param([CONTINUE + OK], [200, b"ok"], id="one-read"),
        pytest.param([CONTINUE, OK], [200, b"ok"], id="two-reads"),
        pytest.param([CONTINUE + HINTS + CONTINUE, OK], [200, b"ok"], id="three-interims"),
        pytest.param([CONTINUE[:10], CONTINUE[10:] + OK], [200, b"ok"], id="split-interim"),
        pytest.param([b"HTTP/1.1 101 Switching Protocols\r\n\r\n"], [101], id="upgrade-kept"),
        pytest.param([b"HTTP/1.1 199 X\r\n\r\n" + OK], [200, b"ok"], id="199"),
        pytest.param([OK], [200, b"ok"], id="no-interim"),
        pytest.param([b"\r\n\n" + OK], [200, b"ok"], id="empty-lines-first"),
        pytest.param([b"\r\n" + CONTINUE + b"\r\n" + OK], [200, b"ok"], id="empty-and-interim"),
    ],
)
def test_interim_answers_are_dropped_before_the_answer(
    reads: list[bytes], expected: list[Any]
) -> None:
    assert answers(reads) == expected


@pytest.mark.usefixtures("patched")
@settings(max_examples=60, deadline=None)
@given(
    interims=st.lists(
        st.sampled_from([CONTINUE, HINTS, b"HTTP/1.1 102 Processing\n\n"]), max_size=3
    ),
    cuts=st.lists(st.integers(min_value=1, max_value=120), max_size=3),
)
def test_any_split_of_interims_and_an_answer_gives_the_answer(
    interims: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(interims) + OK
    points = sorted({c for c in cuts if c < len(data)})
    reads = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    seen = answers(reads)
    assert seen[0] == 200 and b"".join(x for x in seen[1:] if isinstance(x, bytes)) == b"ok"
