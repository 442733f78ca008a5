"""One write per message (runtime/engine/coalesce.py): the merge itself, the mitmproxy internals it
relies on, and the count of writes per kept-alive request through a real lean engine."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import connection
from mitmproxy.addons import next_layer, proxyserver
from mitmproxy.proxy import commands, layer, mode_servers, server, tunnel
from mitmproxy.proxy.layers import http, tls

from sandbox_egress.runtime.engine import layerqueues
from sandbox_egress.runtime.engine.coalesce import MAX_JOINED, coalesced
from sandbox_egress.runtime.engine.lean import LeanMaster, OneRecordPerRequest
from testbed.fixed_upstream import FixedResponse, server_context, start_lean_engine


def conn(protocol: str = "tcp") -> connection.Client:
    return connection.Client(
        peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), transport_protocol=protocol
    )  # type: ignore[arg-type]


A, B, U = conn(), conn(), conn("udp")


def shown(produced: list[commands.Command]) -> list[tuple[str, Any, Any]]:
    out = []
    for c in coalesced(iter(produced)):
        data = c.data if isinstance(c, commands.SendData) else None
        out.append((type(c).__name__, getattr(c, "connection", None), data))
    return out


def send(to: connection.Connection, data: bytes) -> commands.SendData:
    return commands.SendData(to, data)


CASES = {
    "head and body become one write": (
        [send(A, b"head"), send(A, b"body")],
        [("SendData", A, b"headbody")],
    ),
    "a close is preceded by what was sent before it": (
        [send(A, b"x"), commands.CloseConnection(A), send(A, b"y")],
        [("SendData", A, b"x"), ("CloseConnection", A, None), ("SendData", A, b"y")],
    ),
    "two connections keep their own bytes and order": (
        [send(A, b"1"), send(B, b"2"), send(A, b"3")],
        [("SendData", A, b"1"), ("SendData", B, b"2"), ("SendData", A, b"3")],
    ),
    "datagrams are never merged": (
        [send(U, b"d1"), send(U, b"d2")],
        [("SendData", U, b"d1"), ("SendData", U, b"d2")],
    ),
    "a log goes first and does not end the run": (
        [send(A, b"a"), commands.Log("x"), send(A, b"b"), send(A, b"c")],
        [("Log", None, None), ("SendData", A, b"abc")],
    ),
    "a close ends the run": (
        [send(A, b"a"), commands.CloseConnection(B), send(A, b"b")],
        [("SendData", A, b"a"), ("CloseConnection", B, None), ("SendData", A, b"b")],
    ),
    "nothing sent, nothing added": ([], []),
}


@pytest.mark.parametrize("name", CASES)
def test_coalesced(name: str) -> None:
    produced, expected = CASES[name]
    assert shown(produced) == expected


def test_a_single_send_is_handed_on_as_it_is() -> None:
    one = send(A, b"only")
    assert list(coalesced([one])) == [one]


def test_a_joined_write_is_capped() -> None:
    big = b"x" * MAX_JOINED
    assert [len(c.data) for c in coalesced([send(A, big), send(A, b"y")])] == [MAX_JOINED, 1]  # type: ignore[attr-defined]


def test_what_was_sent_before_a_layer_failure_still_goes_out() -> None:
    def failing() -> Iterator[commands.Command]:
        yield send(A, b"sent")
        raise RuntimeError("layer crashed")

    seen = []
    with pytest.raises(RuntimeError):
        for command in coalesced(failing()):
            seen.append(command)
    assert [c.data for c in seen] == [b"sent"]  # type: ignore[attr-defined]


def test_the_internals_coalescing_relies_on() -> None:
    """What runtime/engine/coalesce.py and the engine's two addons assume of mitmproxy."""
    # The handler writes each SendData of its root layer's output with one writer.write.
    handler_source = inspect.getsource(server.ConnectionHandler.server_event)
    assert "self.layer.handle_event(event)" in handler_source
    assert "writer.write(command.data)" in handler_source
    # The server instance sets the top layer before it registers the handler and runs it.
    stream = inspect.getsource(mode_servers.ServerInstance.handle_stream)
    layer_set = stream.index("handler.layer = self.make_top_layer")
    registered = stream.index("self.manager.register_connection(")
    assert layer_set < registered < stream.index("handler.handle_client()")
    assert "register_connection" in vars(proxyserver.Proxyserver)
    # A TLS layer encrypts what its child layer yields, one SendData at a time.
    assert "self.child_layer.handle_event(event)" in inspect.getsource(
        tunnel.TunnelLayer.event_to_child
    )
    assert issubclass(tls.ClientTLSLayer, tunnel.TunnelLayer)
    # A decided NextLayer hands its events to the decided layer's handle_event from then on.
    assert "self.handle_event = self.layer.handle_event" in inspect.getsource(layer.NextLayer._ask)
    assert callable(next_layer.NextLayer.next_layer)
    assert set(inspect.signature(commands.SendData).parameters) == {"connection", "data"}


def test_the_internals_one_record_per_request_relies_on() -> None:
    """What `coalesce_request` (D166) assumes of mitmproxy's HTTP and TLS layers."""
    # The HTTP layer builds the upstream TLS layer and its child in one context...
    get_connection = inspect.getsource(http.HttpLayer.get_connection)
    assert get_connection.index("stack /= tls.ServerTLSLayer(context)") < get_connection.index(
        "stack /= HttpClient(context)"
    )
    # (mitmproxy's own __init__: a lean engine made earlier in this process wraps it, D163)
    assert "self.context.layers.append(self)" in inspect.getsource(layerqueues.ORIGINAL_INIT)
    # ...whose handshake start hands that context to `tls_start_server`.
    assert "TlsData(self.conn, self.context" in inspect.getsource(tls.TLSLayer.start_tls)
    # A stream sends a read request's head, body and end in one run, nothing in between.
    send = inspect.getsource(http.HttpStream.state_consume_request_body)
    head = send.index("RequestHeaders(")
    assert (
        head
        < send.index("RequestData(self.stream_id, content)")
        < send.index("RequestEndOfMessage(self.stream_id)")
    )
    assert "done_after_headers = not (content or self.flow.request.trailers)" in send
    assert {"request", "end_stream"} <= set(inspect.signature(http.RequestHeaders).parameters)


# ---- writes per kept-alive request through a real lean engine ------------------------------

BODY = b"b" * 3000
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
REQUESTS = 5


def tls_records(data: bytes) -> int:
    """How many TLS records `data` (whole records, as the proxy writes them) holds."""
    count = at = 0
    while at + 5 <= len(data):
        at += 5 + int.from_bytes(data[at + 3 : at + 5], "big")
        count += 1
    return count


class Streaming:
    """Streams every response, as the product does (its byte counter is `stream`)."""

    def responseheaders(self, flow: Any) -> None:
        flow.response.stream = True


def writes_per_request(
    tmp_path: Path, *, https: bool, coalesce: bool, body: bytes = b"", stream: bool = False
) -> tuple[int, int, int, int]:
    """Per kept-alive request (a GET, or a POST of `body`): the proxy's writes to the
    client, its writes to upstream, and (HTTPS) the TLS records it sends each of them."""
    counted: dict[str, int] = {}

    async def main() -> tuple[int, int, int, int]:
        upstream_tls = None
        if https:
            upstream_tls = server_context(tmp_path)
        up = await asyncio.get_running_loop().create_server(
            FixedResponse.serving(RESPONSE), "127.0.0.1", 0, ssl=upstream_tls
        )
        up_port = up.sockets[0].getsockname()[1]

        def prepare(master: LeanMaster) -> None:
            if not coalesce:
                _unwrap(master)
            if stream:
                master.addons.add(Streaming())

        master, runner, port = await start_lean_engine(tmp_path / "conf", prepare)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if https:
            writer.write(b"CONNECT localhost:%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % up_port)
            await reader.readuntil(b"\r\n\r\n")
            client_tls = ssl.create_default_context()
            client_tls.check_hostname, client_tls.verify_mode = False, ssl.CERT_NONE
            await writer.start_tls(client_tls, server_hostname="localhost")
            target = b"/"
        else:
            target = b"http://localhost:%d/" % up_port

        method = b"POST" if body else b"GET"
        length = b"Content-Length: %d\r\n" % len(body) if body else b""

        async def one() -> None:
            writer.write(
                b"%s %s HTTP/1.1\r\nHost: localhost:%d\r\n%s\r\n%s"
                % (method, target, up_port, length, body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            assert await reader.readexactly(len(BODY)) == BODY

        await one()  # the first request opens the upstream connection and its TLS
        original = asyncio.StreamWriter.write

        def counting(self: asyncio.StreamWriter, data: Any) -> None:
            if self is not writer:
                leg = "client" if self.get_extra_info("sockname")[1] == port else "upstream"
                counted[leg] = counted.get(leg, 0) + 1
                if https:
                    key = f"{leg} records"
                    counted[key] = counted.get(key, 0) + tls_records(bytes(data))
            original(self, data)

        asyncio.StreamWriter.write = counting  # type: ignore[method-assign]
        try:
            for _ in range(REQUESTS):
                await one()
        finally:
            asyncio.StreamWriter.write = original  # type: ignore[method-assign]
        writer.close()
        master.shutdown()
        await runner
        up.close()
        legs = ("client", "upstream", "client records", "upstream records")
        return tuple(counted.get(k, 0) // REQUESTS for k in legs)  # type: ignore[return-value]

    return asyncio.run(main())


def _unwrap(master: LeanMaster) -> None:
    """The engine without coalescing: mitmproxy's own Proxyserver and NextLayer methods."""
    for addon in master.addons.chain:
        if isinstance(addon, proxyserver.Proxyserver):
            addon.register_connection = proxyserver.Proxyserver.register_connection.__get__(addon)  # type: ignore[method-assign]
        if isinstance(addon, next_layer.NextLayer):
            addon.next_layer = next_layer.NextLayer.next_layer.__get__(addon)  # type: ignore[method-assign]
        if isinstance(addon, OneRecordPerRequest):
            addon.tls_start_server = lambda tls_start: None  # type: ignore[method-assign]


@pytest.mark.parametrize("https", [False, True], ids=["http", "https"])
def test_one_write_per_message_on_each_leg(tmp_path: Path, https: bool) -> None:
    before = writes_per_request(tmp_path / "before", https=https, coalesce=False)
    after = writes_per_request(tmp_path / "after", https=https, coalesce=True)
    # mitmproxy writes a response's head and body separately to the client (two TLS records
    # on HTTPS); the engine writes once, one record. The GET upstream is one write either way.
    assert before == ((2, 1, 2, 1) if https else (2, 1, 0, 0))
    assert after == ((1, 1, 1, 1) if https else (1, 1, 0, 0))


@pytest.mark.parametrize("https", [False, True], ids=["http", "https"])
def test_a_request_with_a_body_is_one_write_and_one_record_upstream(
    tmp_path: Path, https: bool
) -> None:
    posted = b"p" * 1500
    before = writes_per_request(tmp_path / "before", https=https, coalesce=False, body=posted)
    after = writes_per_request(tmp_path / "after", https=https, coalesce=True, body=posted)
    # mitmproxy sends a request's head and body upstream as two writes, on TLS two records
    # (D142 merged the writes, not the records); the engine sends one write, one record (D166).
    assert before == ((2, 2, 2, 2) if https else (2, 2, 0, 0))
    assert after == ((1, 1, 1, 1) if https else (1, 1, 0, 0))


@pytest.mark.parametrize("https", [False, True], ids=["http", "https"])
def test_a_streamed_response_is_one_write_and_one_record(tmp_path: Path, https: bool) -> None:
    before = writes_per_request(tmp_path / "before", https=https, coalesce=False, stream=True)
    after = writes_per_request(tmp_path / "after", https=https, coalesce=True, stream=True)
    # mitmproxy logs "Streaming response" between a streamed response's head and its body:
    # the log is handed on first and the two go out as one write, one record (D172).
    assert before == ((2, 1, 2, 1) if https else (2, 1, 0, 0))
    assert after == ((1, 1, 1, 1) if https else (1, 1, 0, 0))
