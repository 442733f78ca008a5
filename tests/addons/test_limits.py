"""The memory bounds against mitmproxy's own layers, and the internals they rely on.

`addons.layers.limits` and `addons.layers.backpressure` wrap methods of mitmproxy 12's layers. These tests
drive the real layer classes (no network) and pin every internal name and default
the wrappers use, so a mitmproxy upgrade that moves one fails here, by name, instead
of silently dropping a bound.
"""

from __future__ import annotations

import inspect
import json

import h2.connection
import h2.frame_buffer
import pytest
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers import websocket
from mitmproxy.proxy.layers.http import HttpStream, _http1, _http2, _http_h2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestHeaders, ResponseProtocolError
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.layers import backpressure, limits
from sandbox_egress.proxy.limits import HEAD_LIMIT, HEAD_TIMEOUT_S, Limit
from sandbox_egress.proxy.metrics import ProxyMetrics


@pytest.fixture
def refused() -> list[Limit]:
    seen: list[Limit] = []
    limits.install(seen.append)
    return seen


@pytest.fixture
def ctx() -> context.Context:
    with taddons.context(Proxyserver()) as tctx:
        yield context.Context(tflow.tclient_conn(), tctx.options)


def feed(layer: object, *evts: events.Event) -> list[commands.Command]:
    out: list[commands.Command] = []
    for event in evts:
        out += list(layer.handle_event(event))  # type: ignore[attr-defined]
    return out


def test_the_internals_the_wrappers_rely_on_are_where_they_were():
    http1 = inspect.getsource(_http1)
    assert "self.buf.maybe_extract_lines()" in http1  # heads are still read from `buf`
    assert limits._TRAILERS_RAISE in http1  # and HTTP/1 trailers still raise
    for name in ("buf", "state", "passthrough", "done", "read_headers", "mark_done"):
        assert hasattr(_http1.Http1Server, name) or name in ("buf", "state"), name
    assert "self.buf = ReceiveBuffer()" in inspect.getsource(_http1.Http1Connection.__init__)
    assert "HttpRequestHeadersHook(self.flow)" in inspect.getsource(HttpStream)
    relay = inspect.getsource(websocket.WebsocketLayer)
    assert "src_ws.frame_buf" in relay
    assert "self.flow.websocket.messages.append" in relay
    assert limits._original_http1.__qualname__ == "Http1Connection._handle_event"
    assert limits._original_stream.__qualname__ == "HttpStream._handle_event"
    assert "relay_messages" in limits._original_websocket.__qualname__


def test_only_the_upstream_leg_reads_a_status_line():
    """The client leg (`Http1Server`) skips the status-line check (issue 36): in the
    installed mitmproxy only `Http1Client` emits response heads."""
    assert "ResponseHeaders(" not in inspect.getsource(_http1.Http1Server)
    assert "ResponseHeaders(" in inspect.getsource(_http1.Http1Client)


def test_http2_header_lists_are_bounded_by_the_h2_library(ctx: context.Context):
    # hpack refuses a decoded header list over 64 KiB; h2 refuses a 65th CONTINUATION, so
    # an undecoded header block holds at most 65 frames of mitmproxy's 128 KiB (D28).
    assert h2.connection.H2Connection.DEFAULT_MAX_HEADER_LIST_SIZE == HEAD_LIMIT
    assert h2.frame_buffer.CONTINUATION_BACKLOG == 64
    for side in (_http2.Http2Server(ctx), _http2.Http2Client(ctx)):  # sandbox, upstream
        assert side.h2_conn.decoder.max_header_list_size == HEAD_LIMIT
        assert side.h2_conn.max_inbound_frame_size == 2**17


def test_a_request_head_over_the_bound_gets_431_and_the_connection_closes(
    ctx: context.Context, refused: list[Limit]
):
    server = _http1.Http1Server(ctx)
    head = b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 60_000
    out = feed(server, events.Start(), events.DataReceived(ctx.client, head))
    assert [type(c) for c in out] == [commands.RequestWakeup]  # the head's timer
    assert refused == []
    out = feed(server, events.DataReceived(ctx.client, b"a" * 10_000))
    sent, close = out
    assert isinstance(sent, commands.SendData)
    assert isinstance(close, commands.CloseConnection)
    status, _, rest = sent.data.partition(b"\r\n")
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"\r\nX-Egress-Denied: bad_request\r\n" in rest
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["reason"] == "bad_request"
    assert refused == [Limit.REQUEST_HEAD]
    assert len(server.buf) == 0
    assert feed(server, events.DataReceived(ctx.client, b"more")) == []  # done: nothing read


def test_a_response_head_over_the_bound_fails_the_stream(
    ctx: context.Context, refused: list[Limit]
):
    ctx.server.address = ("upstream.test", 80)
    client = _http1.Http1Client(ctx)
    request = tflow.treq()
    feed(client, events.Start(), RequestHeaders(1, request, True))
    out = feed(
        client, events.DataReceived(ctx.server, b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 12_000)
    )
    close, error = out
    assert isinstance(close, commands.CloseConnection)
    assert close.connection is ctx.server
    assert isinstance(error, ReceiveHttp)
    assert isinstance(error.event, ResponseProtocolError)
    assert refused == [Limit.RESPONSE_HEAD]


def test_http1_trailers_are_dropped_instead_of_raising(ctx: context.Context, refused: list[Limit]):
    ctx.server.address = ("upstream.test", 80)
    client = _http1.Http1Client(ctx)
    feed(client, events.Start(), RequestHeaders(1, tflow.treq(), True))
    body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: v\r\n\r\n"
    out = feed(client, events.DataReceived(ctx.server, body))
    kinds = [type(c.event).__name__ for c in out if isinstance(c, ReceiveHttp)]
    assert kinds == ["ResponseHeaders", "ResponseData", "ResponseEndOfMessage"]
    assert refused == []


def test_forwarded_websocket_messages_are_not_kept():
    flow = tflow.twebsocketflow()
    assert flow.websocket is not None
    assert len(flow.websocket.messages) > 1
    last = flow.websocket.messages[-1]
    limits.Limits(ProxyMetrics()).websocket_message(flow)
    assert flow.websocket.messages == [last]


def test_head_refusals_are_counted_as_bad_request_and_by_bound():
    metrics = ProxyMetrics()
    addon = limits.Limits(metrics)
    addon.count(Limit.REQUEST_HEAD)
    addon.count(Limit.WEBSOCKET_MESSAGE)
    value = metrics.registry.get_sample_value
    assert value("egress_limit_refusals_total", {"limit": "request_head"}) == 1
    assert value("egress_limit_refusals_total", {"limit": "websocket_message"}) == 1
    assert value("egress_requests_total", {"decision": "deny", "reason": "bad_request"}) == 1
    # Counted at its stage too, so egress_requests_total stays the sum over stages (D63).
    decided = {"stage": "request", "decision": "deny", "reason": "bad_request"}
    assert value("egress_decisions_total", decided) == 1


@pytest.mark.parametrize("line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 099 Low", b"HTTP/9.9 200 OK"])
def test_a_status_line_rfc_9112_does_not_allow_fails_the_stream(
    ctx: context.Context, refused: list[Limit], line: bytes
):
    ctx.server.address = ("upstream.test", 80)
    client = _http1.Http1Client(ctx)
    feed(client, events.Start(), RequestHeaders(1, tflow.treq(), True))
    out = feed(client, events.DataReceived(ctx.server, line + b"\r\nContent-Length: 2\r\n\r\nok"))
    close, error = out
    assert isinstance(close, commands.CloseConnection)
    assert isinstance(error, ReceiveHttp)
    assert isinstance(error.event, ResponseProtocolError)
    assert error.event.message == "invalid status line"
    assert refused == []  # not a memory bound


def test_the_internals_backpressure_relies_on_are_where_they_were(ctx: context.Context):
    from mitmproxy.proxy import server

    assert "await self.drain_writers()" in inspect.getsource(server.ConnectionHandler)
    assert "self.transports[self.client].handler = handler" in inspect.getsource(server)
    h2_server = _http2.Http2Server(ctx)
    assert backpressure.queued(h2_server) == 0
    h2_server.h2_conn.stream_buffers[1].append(_http_h2.SendH2Data(b"x" * 10, False))
    assert backpressure.queued(h2_server) == 10
    assert backpressure._original_drain.__qualname__ == "ConnectionHandler.drain_writers"
    assert backpressure._original_h2_server.__qualname__ == "Http2Server._handle_event"


def test_a_request_head_not_finished_in_time_gets_408(
    ctx: context.Context, refused: list[Limit], monkeypatch: pytest.MonkeyPatch
):
    clock = iter([100.0, 100.0 + HEAD_TIMEOUT_S, 100.0 + HEAD_TIMEOUT_S + 0.5])
    monkeypatch.setattr(limits.time, "monotonic", lambda: next(clock))
    server = _http1.Http1Server(ctx)
    feed(server, events.Start())
    (timer,) = feed(server, events.DataReceived(ctx.client, b"GET / HTTP/1.1\r\n"))
    assert isinstance(timer, commands.RequestWakeup)
    assert feed(server, events.DataReceived(ctx.client, b"X-Slow: 1\r\n")) == []  # at the limit
    sent, close = feed(server, events.DataReceived(ctx.client, b"X-Slow: 2\r\n"))
    assert isinstance(sent, commands.SendData)
    assert isinstance(close, commands.CloseConnection)
    assert sent.data.startswith(b"HTTP/1.1 408 Request Time-out\r\n")
    assert b"\r\nX-Egress-Denied: bad_request\r\n" in sent.data
    assert refused == [Limit.REQUEST_HEAD_TIMEOUT]


def test_a_client_that_goes_silent_mid_head_gets_408_when_the_timer_fires(
    ctx: context.Context, refused: list[Limit], monkeypatch: pytest.MonkeyPatch
):
    # issue 21: the deadline was checked only when bytes arrived; a silent client held
    # its half-sent head until mitmproxy's 600 s timeout.
    clock = iter([100.0, 100.0 + HEAD_TIMEOUT_S + limits.WAKEUP_MARGIN_S])
    monkeypatch.setattr(limits.time, "monotonic", lambda: next(clock))
    server = _http1.Http1Server(ctx)
    feed(server, events.Start())
    (timer,) = feed(server, events.DataReceived(ctx.client, b"GET / HTTP/1.1\r\nHost: a"))
    assert isinstance(timer, commands.RequestWakeup)
    assert timer.delay == HEAD_TIMEOUT_S + limits.WAKEUP_MARGIN_S
    sent, close = feed(server, events.Wakeup(timer))  # nothing more arrived
    assert isinstance(sent, commands.SendData)
    assert isinstance(close, commands.CloseConnection)
    assert sent.data.startswith(b"HTTP/1.1 408 Request Time-out\r\n")
    assert refused == [Limit.REQUEST_HEAD_TIMEOUT]


def test_the_timer_of_a_head_finished_in_time_does_nothing(
    ctx: context.Context, refused: list[Limit], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(limits.time, "monotonic", lambda: 100.0)
    server = _http1.Http1Server(ctx)
    feed(server, events.Start())
    (timer,) = feed(server, events.DataReceived(ctx.client, b"GET / HTTP/1.1\r\n"))
    feed(server, events.DataReceived(ctx.client, b"Host: a.test\r\n\r\n"))
    assert feed(server, events.Wakeup(timer)) == []
    assert refused == []


def test_a_head_finished_in_time_is_not_refused(
    ctx: context.Context, refused: list[Limit], monkeypatch: pytest.MonkeyPatch
):
    clock = iter([100.0, 100.0 + HEAD_TIMEOUT_S / 2])
    monkeypatch.setattr(limits.time, "monotonic", lambda: next(clock, 1e9))
    server = _http1.Http1Server(ctx)
    feed(server, events.Start())
    feed(server, events.DataReceived(ctx.client, b"GET / HTTP/1.1\r\n"))
    out = feed(server, events.DataReceived(ctx.client, b"Host: a.test\r\n\r\n"))
    assert [type(c.event).__name__ for c in out if isinstance(c, ReceiveHttp)] == [
        "RequestHeaders",
        "RequestEndOfMessage",
    ]
    assert refused == []


@pytest.mark.parametrize(
    ("version", "headers", "follows", "small"),
    [
        ("HTTP/2.0", {}, False, True),  # HEADERS ended the stream: nothing can follow
        ("HTTP/2.0", {}, True, False),  # open stream, no length: any size (D25)
        ("HTTP/2.0", {"content-length": "10"}, True, True),  # h2 enforces the length
        ("HTTP/2.0", {"content-length": str(1 << 20)}, True, False),
        ("HTTP/1.1", {}, False, True),  # no framing header: no body
        ("HTTP/1.1", {"transfer-encoding": "chunked"}, True, False),
        ("HTTP/1.1", {"content-length": "10"}, True, True),
    ],
)
def test_which_refused_requests_can_get_the_readable_403(
    version: str, headers: dict[str, str], follows: bool, small: bool
):
    from sandbox_egress.addons.request import REFUSED_BODY_LIMIT, body_size

    request = tflow.treq(http_version=version.encode(), method=b"POST")
    request.headers.clear()
    request.headers.update(headers)
    assert (body_size(request, follows) <= REFUSED_BODY_LIMIT) is small


def test_websocket_compression_is_neither_offered_nor_accepted():
    addon = limits.Limits(ProxyMetrics())
    flow = tflow.tflow(resp=True)
    flow.request.headers.update(
        {"Upgrade": "websocket", "Sec-WebSocket-Extensions": "permessage-deflate"}
    )
    addon.requestheaders(flow)
    assert "Sec-WebSocket-Extensions" not in flow.request.headers
    assert flow.response is not None
    flow.response.status_code = 101
    flow.response.headers.update(
        {"Upgrade": "websocket", "Sec-WebSocket-Extensions": "permessage-deflate"}
    )
    addon.responseheaders(flow)
    assert "Sec-WebSocket-Extensions" not in flow.response.headers
    plain = tflow.tflow()
    plain.request.headers["Sec-WebSocket-Extensions"] = "x"  # not an upgrade: untouched
    addon.requestheaders(plain)
    assert plain.request.headers["Sec-WebSocket-Extensions"] == "x"
