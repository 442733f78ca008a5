"""runtime/engine/pipelined.py: a request pipelined behind another reaches mitmproxy's HTTP/1
client re-entrantly, while the client still holds the first one; with the patch it goes
out after the first, in its own framing (real layer classes, no network; D670)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import commands, context, events
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    RequestData,
    RequestEndOfMessage,
    RequestHeaders,
    ResponseEndOfMessage,
    ResponseProtocolError,
)
from mitmproxy.test import taddons, tflow

from sandbox_egress.runtime.engine import pipelined

REPO = Path(__file__).resolve().parents[2]
CHUNKED = (b"Transfer-Encoding", b"chunked")


@pytest.fixture
def patched() -> Iterator[None]:
    saved = _http1.Http1Client.send, _http1.Http1Client.__dict__.get("mark_done")
    pipelined.install()
    try:
        yield
    finally:
        _http1.Http1Client.send = saved[0]  # type: ignore[method-assign]
        if saved[1] is None:
            del _http1.Http1Client.mark_done
        else:
            _http1.Http1Client.mark_done = saved[1]  # type: ignore[method-assign]


def _request(method: str, *fields: tuple[bytes, bytes]) -> http.Request:
    request = http.Request.make(method, "https://upstream.test/p")
    request.headers = http.Headers(list(fields))
    return request


def exchange(
    first: list[Any], answer: bytes, pipelined_events: list[Any]
) -> tuple[list[bytes], list[Any]]:
    """Run `first` through an `Http1Client`, then the upstream's `answer`; when the client
    hands the answer's end on, hand it `pipelined_events` at once, as mitmproxy's HTTP
    layer does for a request the sandbox pipelined. What went on the wire, and what the
    client handed on for streams other than the first."""
    with taddons.context(Proxyserver()) as tctx:
        ctx = context.Context(tflow.tclient_conn(), tctx.options)
        ctx.server = tflow.tserver_conn()
        ctx.server.state = ConnectionState.OPEN  # connected, as a live upstream's
        client = _http1.Http1Client(ctx)
        wire: list[bytes] = []
        others: list[Any] = []

        def run(generator: Any) -> None:
            for command in generator:
                if isinstance(command, commands.SendData):
                    wire.append(command.data)
                elif isinstance(command, commands.CloseConnection):
                    command.connection.state = ConnectionState.CLOSED  # as the handler does
                elif isinstance(command, ReceiveHttp):
                    if command.event.stream_id != 1:
                        others.append(command.event)
                    if isinstance(command.event, ResponseEndOfMessage):
                        for event in pipelined_events:  # re-entrant, as in the HttpLayer
                            run(client.handle_event(event))

        run(client.handle_event(events.Start()))
        for event in first:
            run(client.handle_event(event))
        run(client.handle_event(events.DataReceived(ctx.server, answer)))
        return wire, others


POST = [
    RequestHeaders(1, _request("POST", CHUNKED), end_stream=False),
    RequestData(1, b"abc"),
    RequestEndOfMessage(1),
]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
GET = [RequestHeaders(3, _request("GET"), end_stream=True), RequestEndOfMessage(3)]
SIZED = [
    RequestHeaders(3, _request("POST", (b"Content-Length", b"5")), end_stream=False),
    RequestData(3, b"hello"),
    RequestEndOfMessage(3),
]

WITHOUT_CHECKS = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.runtime.test_pipelined import exchange, POST, OK, SIZED
wire, _ = exchange(POST, OK, SIZED)
print(repr(b"".join(wire[3:])))
"""


def test_mitmproxy_hands_the_next_request_on_before_it_is_done() -> None:
    """mitmproxy's own `Http1Client`: with its checks on (as here) the pipelined request
    fails its `assert`; under `python -O`, as the proxy runs (D75), its body goes out framed
    as the first request's chunks, then the first's terminator."""
    with pytest.raises(AssertionError):
        exchange(POST, OK, SIZED)
    done = subprocess.run(
        [sys.executable, "-O", "-c", WITHOUT_CHECKS],
        capture_output=True, text=True, timeout=120, check=True, cwd=REPO,
    )  # fmt: skip
    sized_head = b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\n"
    assert done.stdout.strip() == repr(sized_head + b"5\r\nhello\r\n" + b"0\r\n\r\n")


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    ("second", "sent"),
    [
        pytest.param(GET, [b"GET /p HTTP/1.1\r\n\r\n"], id="get"),
        pytest.param(
            SIZED, [b"POST /p HTTP/1.1\r\nContent-Length: 5\r\n\r\n", b"hello"], id="sized"
        ),
    ],
)
def test_the_pipelined_request_goes_after_the_first_in_its_own_framing(
    second: list[Any], sent: list[bytes]
) -> None:
    wire, others = exchange(POST, OK, second)
    first = [
        b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"3\r\nabc\r\n",
        b"0\r\n\r\n",
    ]
    assert (wire, others) == (first + sent, [])


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", id="close"
        ),
        pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", id="http-1.0"),
    ],
)
def test_a_pipelined_request_on_a_connection_that_ends_gets_the_closed_error(answer: bytes) -> None:
    """The first answer ends the connection: nothing of the kept request is sent, and its
    stream gets the error of a server that closed first (mitmproxy answers it with a 502)."""
    wire, others = exchange(POST, answer, SIZED)
    assert len(wire) == 3 and wire[-1] == b"0\r\n\r\n"
    assert [(type(e), e.stream_id, e.message, e.code) for e in others] == [
        (ResponseProtocolError, 3, pipelined.CLOSED_FIRST, ErrorCode.GENERIC_SERVER_ERROR)
    ]
    assert ErrorCode.GENERIC_SERVER_ERROR.http_status_code() == 502


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    "after",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil", id="an-answer"),
        pytest.param(b"x", id="a-byte"),
    ],
)
def test_a_pipelined_request_on_a_connection_the_proxy_closed_is_never_sent(after: bytes) -> None:
    """Bytes after the first answer's end: mitmproxy closes the connection ("Unexpected data
    from server") while it finishes the first exchange. The kept request must not go out on
    it after the close; its stream gets the closed error (D671)."""
    wire, others = exchange(POST, OK + after, SIZED)
    assert len(wire) == 3 and wire[-1] == b"0\r\n\r\n"
    assert [(type(e), e.stream_id, e.message, e.code) for e in others] == [
        (ResponseProtocolError, 3, pipelined.CLOSED_FIRST, ErrorCode.GENERIC_SERVER_ERROR)
    ]
