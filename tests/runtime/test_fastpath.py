"""The kept-alive fast path (issue 49, runtime/engine/fastpath.py, D610-D613): the same
kept-alive requests through the real lean engine in-process, once through mitmproxy's
layers and once through the fast path, compared on what the upstream received, what the
hooks saw, what the client read and the layers' state when the request reached the
upstream (the hand-over point); and the mitmproxy internals it copies, pinned."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import http as mhttp
from mitmproxy.proxy import layer, tunnel
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http1

from sandbox_egress.runtime.engine import fastpath, patches
from testbed.fixed_upstream import server_context, start_lean_engine

BODY = b"fast path " * 10
WAIT = b"wait"  # a read that is a pause
FIELDS = ("method", "scheme", "host", "port", "path", "authority", "http_version")


def _name(state: Any) -> str:
    return str(getattr(state, "__name__", state))


def _data(request: Any) -> dict[str, Any] | None:
    """A request's fields, less what differs between two runs (the port, the clock)."""
    if request is None:
        return None
    return request.data.__dict__ | {"port": 0, "timestamp_start": 0, "timestamp_end": 0}


def _response(response: Any) -> Any:
    return None if response is None else (response.status_code, response.headers.fields)


def _reader(reader: Any) -> tuple[str, Any, Any]:
    return (
        type(reader).__name__,
        getattr(reader, "_length", None),
        getattr(reader, "_remaining", None),
    )


def snapshot(layers: Any) -> dict[str, Any]:
    """Every layer object's state the fast path sets or reads (D588's list)."""
    server = layers.connections[layers.context.client]
    top = next(v for v in layers.connections.values() if type(v) is tls.ServerTLSLayer)
    client = top.child_layer.child_layer
    seen: dict[str, Any] = {
        "streams": sorted(layers.streams),
        "command_sources": len(layers.command_sources),
        "connections": len(layers.connections),
        "waiting": dict(layers.waiting_for_establishment),
        "layers paused": [x._paused is not None for x in (layers, server, top, client)],
        "layers queued": [len(x._paused_event_queue) for x in (layers, server, top, client)],
        "tunnel": top.tunnel_state,
    }
    for name, h1 in (("server", server), ("client", client)):
        seen |= {
            f"{name}.stream_id": h1.stream_id,
            f"{name}.request": _data(h1.request),
            f"{name}.response": _response(h1.response),
            f"{name}.request_done": h1.request_done,
            f"{name}.response_done": h1.response_done,
            f"{name}.state": _name(h1.state),
            f"{name}.buf": bytes(h1.buf),
            f"{name}.body_reader": _reader(getattr(h1, "body_reader", None)),
            f"{name}.head_since": getattr(h1, fastpath.HEAD_SINCE, None),
        }
    for stream_id, stream in layers.streams.items():
        flow = stream.flow
        seen |= {
            f"stream {stream_id}": (_name(stream.client_state), _name(stream.server_state)),
            "stream paused": stream._paused is not None,
            "stream queue": len(stream._paused_event_queue),
            "stream handle_event": stream._handle_event.__qualname__,
            "stream server": stream.context.server is flow.server_conn,
            "flow": (
                flow.live,
                flow.error and flow.error.msg,
                _response(flow.response),
                flow.request.stream,
            ),
            "flow request": _data(flow.request),
            "flow conns": (flow.client_conn is layers.context.client, flow.server_conn is top.conn),
        }
    return seen


class Recording:
    """The four per-request hooks, finishing at once: what each saw of the request.
    `answer` answers `/answer` in the `request` hook; `kill` kills `/kill` there."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def _note(self, name: str, flow: mhttp.HTTPFlow) -> None:
        fields = tuple(getattr(flow.request, x) for x in FIELDS if x != "port")
        self.seen.append((name, fields, tuple(flow.request.headers.fields), flow.request.content))

    def requestheaders(self, flow: mhttp.HTTPFlow) -> None:
        self._note("requestheaders", flow)

    def request(self, flow: mhttp.HTTPFlow) -> None:
        self._note("request", flow)
        if flow.request.path == "/answer":
            flow.response = mhttp.Response.make(403, b"answered here")
        elif flow.request.path == "/kill":
            flow.kill()

    def responseheaders(self, flow: mhttp.HTTPFlow) -> None:
        self._note("responseheaders", flow)

    def response(self, flow: mhttp.HTTPFlow) -> None:
        self._note("response", flow)


def through_engine(tmp_path: Path, reads: list[bytes], fast: bool) -> dict[str, Any]:
    """`reads` written one at a time on one kept-alive intercepted TLS connection, after a
    first GET; per read: what the client read back, what the upstream received, and the
    layers' state when it did."""
    upstream: list[bytes] = []
    states: list[dict[str, Any]] = []
    found: dict[str, Any] = {}

    class Upstream(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport, self.buffer = transport, b""

        def data_received(self, data: bytes) -> None:
            upstream.append(data)
            states.append(snapshot(found["layers"]))
            self.buffer += data
            while b"\r\n\r\n" in self.buffer:
                head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
                body = b"" if head.startswith(b"HEAD ") else BODY
                if b" /unsolicited " in head:  # a request's head from the upstream, later
                    unsolicited = b"GET /evil HTTP/1.1\r\nHost: localhost\r\n\r\n"
                    asyncio.get_running_loop().call_later(0.05, self.transport.write, unsolicited)
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), body)
                )

    hooks = Recording()
    original_make_stream = http.HttpLayer.make_stream

    def make_stream(self: Any, stream_id: int) -> Any:
        found["layers"] = self
        return original_make_stream(self, stream_id)

    async def main() -> list[bytes]:
        up = await asyncio.get_running_loop().create_server(
            Upstream, "127.0.0.1", 0, ssl=server_context(tmp_path)
        )
        port = up.sockets[0].getsockname()[1]
        master, runner, listen = await start_lean_engine(
            tmp_path / "conf", lambda m: m.addons.add(hooks)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % port)
        await reader.readuntil(b"\r\n\r\n")
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        await writer.start_tls(context, server_hostname="localhost")
        answers: list[bytes] = []
        for read in [b"GET /first HTTP/1.1\r\nHost: localhost\r\n\r\n", *reads]:
            if read == WAIT:
                await asyncio.sleep(0.3)
                continue
            writer.write(read)
            answers.append(await _answer(reader, read.count(b"\r\n\r\n"), read))
            if not answers[-1].endswith(b"\r\n\r\n") and b"HTTP/1.1" not in answers[-1]:
                break
        writer.close()
        master.shutdown()
        await runner
        up.close()
        return answers

    before = dict(fastpath.taken)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(http.HttpLayer, "make_stream", make_stream)
        if fast:
            patch.setattr(fastpath, "_below", tunnel.TunnelLayer.event_to_child)
            patch.setattr(tls.ClientTLSLayer, "event_to_child", fastpath._event_to_child)
        answers = asyncio.run(main())
    return {
        "client read": [a.split(b"\r\n", 1)[0] + b"|" + _without_date(a) for a in answers],
        "upstream": upstream,
        "states": states,
        "hooks": hooks.seen,
        "taken": fastpath.taken["requests"] - before["requests"],
    }


def _without_date(answer: bytes) -> bytes:
    return b"\r\n".join(x for x in answer.split(b"\r\n") if not x.lower().startswith(b"date:"))


async def _answer(reader: asyncio.StreamReader, heads: int, read: bytes) -> bytes:
    """What the client reads back for `read` (`heads` requests), or b"" once it closed."""
    got = b""
    for _ in range(heads):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as closed:
            return got + getattr(closed, "partial", b"")
        length = 0
        for line in head.lower().split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        got += head
        if not read.startswith(b"HEAD ") and length:
            got += await asyncio.wait_for(reader.readexactly(length), 5)
    return got


def both_ways(tmp_path: Path, reads: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    layers = through_engine(tmp_path / "layers", reads, fast=False)
    fast = through_engine(tmp_path / "fast", reads, fast=True)
    return layers, fast


def assert_same(layers: dict[str, Any], fast: dict[str, Any]) -> None:
    for key in ("client read", "upstream", "hooks"):
        assert fast[key] == layers[key], key
    assert len(fast["states"]) == len(layers["states"])
    for ours, theirs in zip(fast["states"], layers["states"], strict=True):
        assert ours == theirs


NAMES = st.sampled_from(
    ["Accept", "User-Agent", "X-Thing", "Cookie", "Authorization", "Connection"]
)
VALUES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=0, max_size=20)
PATHS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="#"), max_size=30
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"GET", b"HEAD"]))
    path = b"/" + draw(PATHS).encode()
    headers = [
        (n, "keep-alive" if n == "Connection" else v)
        for n, v in draw(st.lists(st.tuples(NAMES, VALUES), max_size=4, unique_by=lambda h: h[0]))
    ]
    lines = b"".join(b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in headers)
    return b"%s %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n" % (method, path, lines)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reads=st.lists(requests(), min_size=1, max_size=5))
def test_the_fast_path_leaves_what_the_layers_leave(
    tmp_path_factory: pytest.TempPathFactory, reads: list[bytes]
) -> None:
    tmp = tmp_path_factory.mktemp("same")
    layers, fast = both_ways(tmp, reads)
    assert layers["taken"] == 0
    assert fast["taken"] == len(reads)  # every generated read went below the layers
    assert len(fast["upstream"]) == len(reads) + 1
    assert_same(layers, fast)


CASES = {
    # (reads after the first GET, how many the fast path takes)
    "an answer set by the request hook": (
        [
            b"GET /answer HTTP/1.1\r\nHost: localhost\r\n\r\n",
            b"GET /after HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ],
        2,
    ),
    "a flow killed by the request hook": ([b"GET /kill HTTP/1.1\r\nHost: localhost\r\n\r\n"], 1),
    "a header name the stream refuses": (
        [b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header: x\r\n\r\n"],
        1,
    ),
    "a head the parser refuses": ([b"GET / HTTP/1.1\r\nHost: localhost\r\nNo colon\r\n\r\n"], 0),
    "two pipelined requests": (
        [b"GET /a HTTP/1.1\r\nHost: localhost\r\n\r\nGET /b HTTP/1.1\r\nHost: localhost\r\n\r\n"],
        0,
    ),
    "a POST with a body": (
        [b"POST /p HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nhi"],
        0,
    ),
    "Expect: 100-continue": (
        [b"GET /e HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n\r\n"],
        0,
    ),
    "HTTP/1.0": ([b"GET /old HTTP/1.0\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n"], 0),
    "Connection: close": ([b"GET /c HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"], 0),
    "an absolute-form target": (
        [b"GET https://localhost/x HTTP/1.1\r\nHost: localhost\r\n\r\n"],
        0,
    ),
    "a space before the colon": ([b"GET / HTTP/1.1\r\nHost : localhost\r\n\r\n"], 1),
    "a request head the upstream sends": (
        [
            b"GET /unsolicited HTTP/1.1\r\nHost: localhost\r\n\r\n",
            WAIT,
            b"GET /next HTTP/1.1\r\nHost: localhost\r\n\r\n",
        ],
        2,  # the client's two, never the upstream's
    ),
}


@pytest.mark.parametrize(("reads", "taken"), CASES.values(), ids=CASES.keys())
def test_an_unusual_request_is_answered_as_the_layers_answer_it(
    tmp_path: Path, reads: list[bytes], taken: int
) -> None:
    layers, fast = both_ways(tmp_path, reads)
    assert fast["taken"] == taken
    assert_same(layers, fast)


def test_an_answer_set_by_a_hook_reaches_the_client_and_not_the_upstream(tmp_path: Path) -> None:
    fast = through_engine(tmp_path, [b"GET /answer HTTP/1.1\r\nHost: localhost\r\n\r\n"], fast=True)
    assert fast["client read"][1].startswith(b"HTTP/1.1 403 Forbidden|")
    assert fast["client read"][1].endswith(b"answered here")
    assert len(fast["upstream"]) == 1  # only the first GET


def test_it_is_off_by_default() -> None:
    row = next(r for r in patches.PATCHES if r.name == "fastpath")
    assert row.switch == "fast_path"
    assert tls.ClientTLSLayer.event_to_child is tunnel.TunnelLayer.event_to_child


def test_the_internals_it_copies_are_mitmproxys() -> None:
    to_child = inspect.getsource(http.HttpLayer.event_to_child)
    for line in (
        "if command.blocking or isinstance(command, commands.RequestWakeup):",
        "self.command_sources[command] = child",
        "yield from self.make_stream(command.event.stream_id)",
        "conn = self.connections[command.connection]",
        "self.streams.pop(command.stream_id, None)",
        "yield from self.get_connection(command)",
        "yield from self.register_connection(command)",
        "self.connections[command.connection] = child",
    ):
        assert line in to_child
    reuse = inspect.getsource(http.HttpLayer.get_connection)
    assert "GetHttpConnectionCompleted(event, (connection, None))" in reuse
    assert "if connection in self.waiting_for_establishment:" in reuse
    heads = inspect.getsource(_http1.Http1Server.read_headers)
    parse = heads.index("self.request = http1.read_request_head(")
    assert parse < heads.index(
        "RequestHeaders(\n                        self.stream_id, self.request, expected_body_size == 0"
    )
    assert heads.index("self.body_reader = make_body_reader(expected_body_size)") < heads.index(
        "self.state = self.read_body"
    )
    send = inspect.getsource(_http1.Http1Client.send)
    assert "raw = http1.assemble_request_head(request)" in send
    assert "yield from self.mark_done(request=True)" in send
    assert "self.state = self.wait" in inspect.getsource(_http1.Http1Server.mark_done)
    assert "yield from self._handle_command(command)" in inspect.getsource(
        tunnel.TunnelLayer.event_to_child
    )
    assert "_handle_command" not in tls.ClientTLSLayer.__dict__
    assert layer.NextLayer.handle_event.__qualname__ == "NextLayer.handle_event"
