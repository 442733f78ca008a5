"""Empty lines before a request line (runtime/emptylines.py, D336): dropped from the client
data a `NextLayer` holds, only at the start, only for TCP; the decision waits while
nothing else has arrived."""

from __future__ import annotations

from mitmproxy import connection
from mitmproxy.options import Options
from mitmproxy.proxy import events, layer
from mitmproxy.proxy.context import Context

from sandbox_egress.runtime.emptylines import skip_empty_lines


def held(*chunks: bytes, udp: bool = False) -> layer.NextLayer:
    client = connection.Client(
        peername=("198.18.0.1", 40000),
        sockname=("198.18.0.2", 80),
        timestamp_start=0.0,
        transport_protocol="udp" if udp else "tcp",
    )
    nextlayer = layer.NextLayer(Context(client, Options()))
    nextlayer.events = [events.DataReceived(client, chunk) for chunk in chunks]
    return nextlayer


def test_leading_empty_lines_are_dropped_across_reads() -> None:
    nextlayer = held(b"\r\n", b"\n\r\nPOST / HTTP/1.1\r\n\r\n\r\n", b"\r\nmore")
    assert skip_empty_lines(nextlayer)
    assert nextlayer.data_client() == b"POST / HTTP/1.1\r\n\r\n\r\n\r\nmore"


def test_only_empty_lines_so_far_waits() -> None:
    nextlayer = held(b"\r\n\r\n", b"\n")
    assert not skip_empty_lines(nextlayer)
    assert nextlayer.events == []


def test_nothing_to_skip_and_udp_are_left_alone() -> None:
    assert skip_empty_lines(held())
    tls = held(b"\x16\x03\x01\x00")
    assert skip_empty_lines(tls) and tls.data_client() == b"\x16\x03\x01\x00"
    datagram = held(b"\r\n\x00\x01", udp=True)
    assert skip_empty_lines(datagram) and datagram.data_client() == b"\r\n\x00\x01"
