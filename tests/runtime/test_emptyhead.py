"""runtime/engine/emptyhead.py: empty lines before a request line in one read are all
skipped, on a kept-alive connection too (real layer classes, no network; D672)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import context, events
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestEndOfMessage, RequestHeaders
from mitmproxy.test import taddons, tflow

from sandbox_egress.runtime.engine import emptyhead

GET = b"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n"


@pytest.fixture
def patched() -> Iterator[None]:
    saved = _http1.Http1Server.read_headers
    emptyhead.install()
    try:
        yield
    finally:
        _http1.Http1Server.read_headers = saved  # type: ignore[method-assign]


def heads(reads: list[bytes]) -> list[tuple[str, int]]:
    """The (method and target, stream) of each request head `Http1Server` hands on for
    `reads`; each request's end is taken as answered at once (its stream done)."""
    with taddons.context(Proxyserver()) as tctx:
        ctx = context.Context(tflow.tclient_conn(), tctx.options)
        server = _http1.Http1Server(ctx)
        seen: list[tuple[str, int]] = []

        def run(generator: Any) -> None:
            for command in generator:
                if isinstance(command, ReceiveHttp):
                    if isinstance(command.event, RequestHeaders):
                        request = command.event.request
                        seen.append((f"{request.method} {request.path}", command.event.stream_id))
                    elif isinstance(command.event, RequestEndOfMessage):
                        server.response = tflow.tresp()
                        run(server.mark_done(response=True))

        run(server.handle_event(events.Start()))
        for data in reads:
            run(server.handle_event(events.DataReceived(ctx.client, data)))
        return seen


def test_mitmproxy_waits_for_another_read_after_an_empty_line() -> None:
    """mitmproxy alone: the empty line is taken, the request behind it waits for a read."""
    assert heads([b"\r\n" + GET]) == []
    assert heads([GET + b"\r\n" + GET]) == [("GET /p", 1)]
    assert heads([b"\r\n" + GET, b"\r\n"]) == [("GET /p", 1)]


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        pytest.param([b"\r\n" + GET], [("GET /p", 1)], id="first"),
        pytest.param([GET + b"\r\n" + GET], [("GET /p", 1), ("GET /p", 3)], id="pipelined"),
        pytest.param([GET + b"\r\n\n\r\n" + GET], [("GET /p", 1), ("GET /p", 3)], id="three"),
        pytest.param([b"\r\n" + GET[:10], GET[10:]], [("GET /p", 1)], id="split-head"),
        pytest.param([b"\r\n"], [], id="only-an-empty-line"),
    ],
)
def test_every_empty_line_before_a_request_line_is_skipped(
    reads: list[bytes], expected: list[tuple[str, int]]
) -> None:
    assert heads(reads) == expected


@pytest.mark.usefixtures("patched")
@settings(max_examples=60, deadline=None)
@given(
    empty=st.lists(st.sampled_from([b"\r\n", b"\n"]), max_size=4).map(b"".join),
    cuts=st.lists(st.integers(min_value=1, max_value=80), max_size=3),
)
def test_any_split_of_empty_lines_and_two_requests_gives_both(
    empty: bytes, cuts: list[int]
) -> None:
    data = GET + empty + GET
    points = sorted({c for c in cuts if c < len(data)})
    reads = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert heads(reads) == [("GET /p", 1), ("GET /p", 3)]
