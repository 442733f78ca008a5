"""runtime/engine/relay.py: off unless `--body-relay` asks, over tlsread when on, and the
mitmproxy internals it reads and bypasses are those of the installed mitmproxy (a change
there fails here, not as a corrupted body). Its conformance, both ways, is end to end:
tests/e2e/test_streaming_e2e.py, test_budget_e2e.py, test_lingering_e2e.py and the
adversary memory and upstream suites run with the relay off and on."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from h11._readers import ChunkedReader, ContentLengthReader
from mitmproxy.proxy import commands, layer, tunnel
from mitmproxy.proxy.layers import http, tls
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.test import tflow

from sandbox_egress.runtime.cmdline import parser
from sandbox_egress.runtime.engine import bodyread, layerqueues, patches, relay, tlsread
from testbed.fixed_upstream import server_context
from tests.runtime.test_tlsread import Leg, _ciphertext, _pair


def _source(obj: object) -> str:
    return inspect.getsource(obj)  # type: ignore[arg-type]


def test_the_internals_the_relay_reads_are_mitmproxys() -> None:
    # The HTTP/1 layer reads a body from its buffer with h11's reader, which counts down.
    assert "self.body_reader(self.buf)" in _source(bodyread.ORIGINAL_READ_BODY)
    assert "self._remaining" in _source(ContentLengthReader.__call__)
    # A streamed body's chunk goes through the stream's callable, then to the other leg.
    down = _source(http.HttpStream.state_stream_response_body)
    assert "self.flow.response.stream(event.data)" in down
    assert "ResponseData(self.stream_id, chunk), self.context.client" in down
    up = _source(http.HttpStream.state_stream_request_body)
    assert "self.flow.request.stream(event.data)" in up
    assert "RequestData(self.stream_id, chunk), self.context.server" in up
    # ... where, without chunked coding, the HTTP/1 layer sends the bytes as they are.
    for side in (_http1.Http1Server, _http1.Http1Client):
        sent = _source(side.send)
        assert '"chunked" in self.' in sent and "raw = event.data" in sent
    # The TLS layers: a SendData for a layer's own connection is encrypted by `send_data`.
    assert "self.send_data(command.data)" in _source(tunnel.TunnelLayer._handle_command)
    assert "self.tls.sendall(data)" in _source(tls.TLSLayer.send_data)
    assert "self.tls_interact()" in _source(tls.TLSLayer.send_data)
    # Where the relay finds the layers: the HTTP layer's tables, HttpClient's child, the
    # NextLayer that holds a client leg's HTTP layer, a paused layer's queue.
    init = _source(http.HttpLayer.__init__)
    assert "self.connections = {}" in init and "self.streams = {}" in init
    assert "self.child_layer = Http1Client(self.context)" in _source(http.HttpClient._handle_event)
    assert "self.layer" in _source(layer.NextLayer.__init__)
    assert "self._paused = None" in _source(layerqueues.ORIGINAL_INIT)  # mitmproxy's


def test_it_is_off_by_default() -> None:
    assert parser().parse_args(["run", "--config", "x.yaml"]).body_relay is False
    (row,) = [row for row in patches.PATCHES if row.name == "relay"]
    assert row.switch == "body_relay" and not row.mitmdump
    before = tls.TLSLayer.receive_data
    patches.install(patches.Stage.ENGINE)  # what a run without --body-relay does
    try:
        assert tls.TLSLayer.receive_data is tlsread._receive_data
        assert "relay" not in patches.active("lean")
    finally:
        tls.TLSLayer.receive_data = before  # type: ignore[method-assign]


def test_switched_on_it_wraps_tlsreads_reading() -> None:
    before = tls.TLSLayer.receive_data
    tlsread.install()
    try:
        relay.install()
        relay.install()  # idempotent: not wrapped twice
        assert tls.TLSLayer.receive_data is relay._receive_data
        assert relay._below is tlsread._receive_data
    finally:
        tls.TLSLayer.receive_data = before  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("relay")
    server_context(directory)  # writes up.pem: a certificate and its key
    return directory / "up.pem"


class Out:
    """The other leg's TLS layer, as `_relay` uses it: its connection and `send_data`."""

    def __init__(self) -> None:
        self.conn = tflow.tserver_conn()
        self.encrypted: list[bytes] = []

    def send_data(self, data: bytes) -> Generator[commands.Command, Any, None]:
        self.encrypted.append(data)
        yield commands.SendData(self.conn, b"<" + data + b">")


def _route(
    remaining: int | None, above: bool, out: Out, seen: list[bytes], chunked: bool = False
) -> relay.Route:
    """A route of a body of `remaining` bytes, or of a chunked body (None)."""
    reader = ContentLengthReader(remaining) if remaining is not None else ChunkedReader()

    def stream(chunk: bytes) -> list[bytes]:  # a stream callable that splits and marks
        seen.append(chunk)
        return [chunk[:1].upper(), b"", chunk[1:]]

    return relay.Route(reader, stream, object(), out, above, chunked)  # type: ignore[arg-type]


@pytest.mark.parametrize("above", [True, False], ids=["download", "upload"])
def test_a_read_goes_through_the_stream_callable_to_the_other_leg_but_its_last_byte(
    certificate: Path, above: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = _pair(certificate)
    out, seen, body = Out(), list[bytes](), b"abcdefghij" * 5000
    route = _route(len(body), above, out, seen)
    monkeypatch.setattr(relay, "_route", lambda layer: route)
    before = dict(relay.relayed)
    leg = Leg(client)
    wire = _ciphertext(server, [body], close=True)
    sent = []
    for cut in (0, 1000, len(wire) // 2):  # three reads, the last with the close_notify
        end = {0: 1000, 1000: len(wire) // 2}.get(cut, len(wire))
        sent += list(relay._receive_data(leg, wire[cut:end]))
    relayed = body[:-1]
    assert b"".join(seen) == relayed  # the callable saw every relayed byte once, in order
    data = [c for c in sent if isinstance(c, commands.SendData)]
    if above:  # a download: plaintext for the client's TLS layer above to encrypt
        assert all(c.connection is out.conn for c in data) and not out.encrypted
        assert b"".join(c.data for c in data) == b"".join(s[:1].upper() + s[1:] for s in seen)
    else:  # an upload: encrypted by the upstream's TLS layer, right here
        assert b"".join(out.encrypted) == b"".join(s[:1].upper() + s[1:] for s in seen)
    assert route.reader._remaining == 1
    assert leg.got == [("data", body[-1:]), ("closed",)]  # the last byte: the layers'
    assert relay.relayed["bytes"] - before["bytes"] == len(relayed)


@pytest.mark.parametrize("above", [True, False], ids=["download", "upload"])
def test_a_chunked_body_goes_through_framed_but_its_last_chunk(
    certificate: Path, above: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = _pair(certificate)
    out, seen = Out(), list[bytes]()
    data = [bytes([65 + n % 26]) * (n * 37 + 1) for n in range(40)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in data) + b"0\r\n\r\n"
    route = _route(None, above, out, seen, chunked=True)
    monkeypatch.setattr(relay, "_route", lambda layer: route)
    leg = Leg(client)
    wire = _ciphertext(server, [body], close=False)
    sent = []
    for cut in (0, 1000, len(wire) // 2):  # three reads that cut chunks and size lines
        end = {0: 1000, 1000: len(wire) // 2}.get(cut, len(wire))
        sent += list(relay._receive_data(leg, wire[cut:end]))
    assert b"".join(seen) == b"".join(data)  # every byte of data, once, in order
    framed = b"".join(
        b"%x\r\n%s\r\n" % (len(m), m) for s in seen for m in (s[:1].upper(), s[1:]) if m
    )
    if above:
        got = b"".join(c.data for c in sent if isinstance(c, commands.SendData))
    else:
        got = b"".join(out.encrypted)
    assert got == framed  # each non-empty piece the callable returned, framed on its own
    assert leg.got == [("data", b"0\r\n\r\n")]  # the last chunk: the layers'
    reader = route.reader
    assert isinstance(reader, ChunkedReader)
    assert (reader._bytes_in_chunk, reader._bytes_to_discard) == (0, b"")


def test_without_a_route_the_read_is_tlsreads(
    certificate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = _pair(certificate)
    monkeypatch.setattr(relay, "_route", lambda layer: None)
    monkeypatch.setattr(relay, "_below", tlsread._receive_data)
    leg = Leg(client)
    list(relay._receive_data(leg, _ciphertext(server, [b"hello"], close=False)))
    assert leg.got == [("data", b"hello")]
