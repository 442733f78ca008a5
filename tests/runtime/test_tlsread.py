"""runtime/engine/tlsread.py: a TLS leg hands on the same plaintext, close and errors as mitmproxy's
`TLSLayer.receive_data`, over real TLS records (pyOpenSSL in memory, no network), however
the ciphertext is split."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mitmproxy import connection
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers import tls
from mitmproxy.test import tflow
from OpenSSL import SSL

from sandbox_egress.runtime.engine import tlsread
from testbed.fixed_upstream import server_context


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tlsread")
    server_context(directory)  # writes up.pem: a certificate and its key
    return directory / "up.pem"


class Leg:
    """What `receive_data` uses of a TLS layer; the child's events are written down."""

    tls_interact = tlsread.ORIGINAL_TLS_INTERACT

    def __init__(self, conn: SSL.Connection) -> None:
        self.tls, self.conn, self.debug = conn, tflow.tclient_conn(), ""
        self.got: list[Any] = []

    def event_to_child(self, event: events.Event) -> Generator[commands.Command, Any, None]:
        if isinstance(event, events.DataReceived):
            self.got.append(("data", event.data))
        else:
            self.got.append(("closed",))
        yield from ()


def _pair(pem: Path) -> tuple[SSL.Connection, SSL.Connection]:
    """A TLS 1.3 server and client in memory, handshake done."""
    server_ctx = SSL.Context(SSL.TLS_SERVER_METHOD)
    server_ctx.use_certificate_chain_file(str(pem))
    server_ctx.use_privatekey_file(str(pem))
    server = SSL.Connection(server_ctx)
    server.set_accept_state()
    client = SSL.Connection(SSL.Context(SSL.TLS_CLIENT_METHOD))
    client.set_connect_state()
    for _ in range(10):
        for one, other in ((client, server), (server, client)):
            with contextlib.suppress(SSL.WantReadError):
                one.do_handshake()
            with contextlib.suppress(SSL.WantReadError):
                other.bio_write(one.bio_read(1 << 20))
    assert client.get_protocol_version_name() == "TLSv1.3"
    return server, client


def _ciphertext(server: SSL.Connection, writes: list[bytes], close: bool) -> bytes:
    for data in writes:
        server.sendall(data)
    if close:
        server.shutdown()
    out = b""
    while True:
        try:
            out += server.bio_read(1 << 20)
        except SSL.WantReadError:
            return out


def _read(
    pem: Path, receive: Any, writes: list[bytes], cuts: list[int], close: bool, tail: bytes = b""
) -> tuple[list[Any], list[str]]:
    server, client = _pair(pem)
    wire = _ciphertext(server, writes, close) + tail
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    leg = Leg(client)
    logged = []
    for a, b in zip(points, points[1:], strict=False):
        for command in receive(leg, wire[a:b]):
            if isinstance(command, commands.Log):
                logged.append(command.message)
    return leg.got, logged


def test_the_method_it_replaces_is_mitmproxys() -> None:
    source = inspect.getsource(tlsread.ORIGINAL_RECEIVE_DATA)
    for line in (
        "plaintext.extend(self.tls.recv(65535))",
        "except SSL.WantReadError:",
        "except SSL.ZeroReturnError:",
        'yield commands.Log(f"TLS Error: {e}", WARNING)',
        "yield from self.tls_interact()",
        "events.DataReceived(self.conn, bytes(plaintext))",
        "self.conn.state &= ~connection.ConnectionState.CAN_READ",
        "yield from self.event_to_child(events.ConnectionClosed(self.conn))",
    ):
        assert line in source, line
    assert "def _raise_ssl_error(self, ssl: Any, result: int)" in inspect.getsource(SSL.Connection)
    for layer in (tls.ClientTLSLayer, tls.ServerTLSLayer):
        assert "receive_data" not in vars(layer)


def test_records_written_before_the_event_are_read_whole(pem: Path) -> None:
    # All the ciphertext arrives before an empty event (as after the handshake): the
    # buffer, sized for the event, is filled more than once.
    server, client = _pair(pem)
    body = bytes(range(256)) * 1200  # 300 KiB: nineteen records
    client.bio_write(_ciphertext(server, [body], close=True))
    leg = Leg(client)
    assert list(tlsread._receive_data(leg, b"")) == []
    assert leg.got == [("data", body), ("closed",)]
    assert not leg.conn.state & connection.ConnectionState.CAN_READ


def test_garbage_after_records_is_logged_and_what_came_before_handed_on(pem: Path) -> None:
    writes = [b"before the garbage"]
    fast = _read(pem, tlsread._receive_data, writes, [], False, tail=b"\x17\x03\x03\x00\x05junk!")
    original = _read(
        pem, tlsread.ORIGINAL_RECEIVE_DATA, writes, [], False, tail=b"\x17\x03\x03\x00\x05junk!"
    )
    assert fast[0] == original[0] == [("data", b"before the garbage")]
    assert [m.split(":")[0] for m in fast[1]] == [m.split(":")[0] for m in original[1]]
    assert fast[1][0].startswith("TLS Error: ")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    writes=st.lists(st.binary(min_size=1, max_size=40_000), min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0, max_value=170_000), max_size=10),
    close=st.booleans(),
)
def test_the_same_plaintext_and_close_as_mitmproxy_for_any_split(
    pem: Path, writes: list[bytes], cuts: list[int], close: bool
) -> None:
    fast = _read(pem, tlsread._receive_data, writes, cuts, close)
    assert fast == _read(pem, tlsread.ORIGINAL_RECEIVE_DATA, writes, cuts, close)
    assert b"".join(g[1] for g in fast[0] if g[0] == "data") == b"".join(writes)
    assert (("closed",) in fast[0]) is close


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=st.lists(st.binary(min_size=1, max_size=200_000), min_size=1, max_size=3))
def test_what_openssl_wrote_goes_out_in_one_piece(pem: Path, writes: list[bytes]) -> None:
    sent: dict[str, list[bytes]] = {}
    for name, interact in (
        ("fast", tlsread._tls_interact),
        ("original", tlsread.ORIGINAL_TLS_INTERACT),
    ):
        server, client = _pair(pem)
        leg = Leg(server)
        for data in writes:
            server.sendall(data)
        out = list(interact(leg))
        assert all(isinstance(c, commands.SendData) and c.connection is leg.conn for c in out)
        sent[name] = [c.data for c in out]  # type: ignore[attr-defined]
        assert list(interact(leg)) == []  # nothing left behind
        reader = Leg(client)
        assert list(tlsread._receive_data(reader, b"".join(sent[name]))) == []
        assert reader.got == [("data", b"".join(writes))]
    assert len(sent["fast"]) == 1
    assert len(sent["original"]) >= 1
    assert len(sent["fast"][0]) == sum(map(len, sent["original"]))


def test_a_datagram_leg_keeps_mitmproxys_reads(pem: Path) -> None:
    server, _ = _pair(pem)
    leg = Leg(server)
    leg.conn.transport_protocol = "udp"
    server.sendall(b"x" * 100_000)
    out = list(tlsread._tls_interact(leg))
    assert [len(c.data) for c in out][:1] == [65535]  # type: ignore[attr-defined]
