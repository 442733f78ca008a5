"""runtime/engine/bodyread.py: a request body of known length reaches the HTTP stream as the very
bytes that arrived, and mitmproxy's HTTP/1 server layer hands on the same events as
without it, however the pipelined requests are split (real layer classes, no network)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import h11._readers
import h11._receivebuffer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    RequestProtocolError,
    ResponseEndOfMessage,
    ResponseHeaders,
)
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.layers import limits
from sandbox_egress.runtime.engine import bodyread


@pytest.fixture(scope="module")
def ctx() -> Iterator[context.Context]:
    with taddons.context(Proxyserver()) as tctx:
        yield context.Context(tflow.tclient_conn(), tctx.options)


def _request(method: bytes, body: bytes, close: bool = False) -> bytes:
    head = b"%s /up HTTP/1.1\r\nHost: upstream.test\r\nContent-Length: %d\r\n" % (
        method,
        len(body),
    )
    return head + (b"Connection: close\r\n" if close else b"") + b"\r\n" + body


def _served(
    ctx: context.Context, chunks: list[bytes], fast: bool, late: bool = False
) -> tuple[list[Any], list[Any]]:
    """What an `Http1Server` hands on for `chunks` arriving one event each (each request
    answered as soon as its body ended, or with `late` only after the next chunk arrived,
    which the layer then holds in its buffer), and the `RequestData` chunks themselves."""
    read_body = bodyread._read_body if fast else bodyread.ORIGINAL_READ_BODY
    saved = _http1.Http1Connection.read_body
    _http1.Http1Connection.read_body = read_body  # type: ignore[method-assign]
    try:
        server = _http1.Http1Server(context.Context(ctx.client, ctx.options))
        seen: list[Any] = []
        data: list[Any] = []

        def handle(event: events.Event) -> None:
            for command in server.handle_event(event):
                if isinstance(command, ReceiveHttp):
                    got = command.event
                    if isinstance(got, RequestHeaders):
                        seen.append(("head", got.request.method, got.end_stream))
                    elif isinstance(got, RequestData):
                        seen.append(("data", bytes(got.data)))
                        data.append(got.data)
                    elif isinstance(got, RequestEndOfMessage):
                        seen.append(("end",))
                        unanswered.append(got.stream_id)
                        if not late:
                            answer()
                    elif isinstance(got, RequestProtocolError):
                        seen.append(("error", got.message))
                elif isinstance(command, commands.SendData):
                    seen.append(("sent", command.data.split(b"\r\n", 1)[0]))
                elif isinstance(command, commands.CloseConnection):
                    seen.append(("close",))

        unanswered: list[int] = []

        def answer(count: int | None = None) -> None:
            # Answering one request may let the layer read the next from its buffer.
            while unanswered and (count is None or count > 0):
                count = None if count is None else count - 1
                stream = unanswered.pop(0)
                handle(ResponseHeaders(stream, http.Response.make(200, b""), False))
                handle(ResponseEndOfMessage(stream))

        handle(events.Start())
        for chunk in chunks:
            due = len(unanswered)  # with `late`, what ended before this chunk
            handle(events.DataReceived(ctx.client, chunk))
            answer(due if late else None)
        answer()
        handle(events.ConnectionClosed(ctx.client))
        return seen, data
    finally:
        _http1.Http1Connection.read_body = saved  # type: ignore[method-assign]


def _split(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    return [wire[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


def test_the_internals_it_relies_on() -> None:
    # h11's reader keeps its count in `_remaining`; mitmproxy reads the body through
    # `read_body` as the layer's state, from a `ReceiveBuffer` it appends each event to.
    assert "self._remaining -= len(data)" in inspect.getsource(h11._readers.ContentLengthReader)
    assert "def __len__" in inspect.getsource(h11._receivebuffer.ReceiveBuffer)
    # (mitmproxy's own: addons.limits, once installed by a test in this process, wraps it)
    handle = inspect.getsource(limits._original_http1)
    assert "self.buf += event.data" in handle and "self.state(event)" in handle
    assert "self.state = self.read_body" in inspect.getsource(_http1.Http1Server.read_headers)
    assert "bytes(h11_event.data)" in inspect.getsource(bodyread.ORIGINAL_READ_BODY)


def test_a_body_chunk_is_the_object_that_arrived(ctx: context.Context) -> None:
    wire = _request(b"POST", b"x" * 300_000)
    head, body = wire[: len(wire) - 300_000], wire[len(wire) - 300_000 :]
    chunks = [head, body[:100_000], body[100_000:200_000], body[200_000:]]
    seen, data = _served(ctx, chunks, fast=True)
    assert [d is c for d, c in zip(data, chunks[1:], strict=True)] == [True, True, True]
    assert seen == _served(ctx, chunks, fast=False)[0]
    assert seen[-3:] == [("end",), ("sent", b"HTTP/1.1 200 OK"), ("close",)]


def test_a_short_body_at_the_close_is_mitmproxys_protocol_error(ctx: context.Context) -> None:
    wire = _request(b"PUT", b"y" * 50_000)[:-10_000]
    chunks = [wire[:-30_000], wire[-30_000:]]
    seen = _served(ctx, chunks, fast=True)[0]
    assert seen == _served(ctx, chunks, fast=False)[0]
    assert seen[-1][0] in ("error", "close")


@settings(max_examples=150, deadline=None)
@given(
    bodies=st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=13_000), max_size=12),
    close_last=st.booleans(),
    late=st.booleans(),
)
def test_the_same_events_as_mitmproxy_for_any_split_of_pipelined_requests(
    ctx: context.Context, bodies: list[bytes], cuts: list[int], close_last: bool, late: bool
) -> None:
    wire = b"".join(
        _request(b"POST", body, close_last and i == len(bodies) - 1)
        for i, body in enumerate(bodies)
    )
    chunks = _split(wire, cuts)
    fast, _ = _served(ctx, chunks, fast=True, late=late)
    assert fast == _served(ctx, chunks, fast=False, late=late)[0]
    assert b"".join(e[1] for e in fast if e[0] == "data") == b"".join(bodies)
