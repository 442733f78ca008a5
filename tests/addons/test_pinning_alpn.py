"""The ALPN offers of an upstream connection, set before its TLS handshake (D82)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from mitmproxy.connection import Client, Server
from mitmproxy.test import taddons

from sandbox_egress.addons.pinning import offer_http11


def offered(
    client_offers: Sequence[bytes], http2: bool = True, preset: Sequence[bytes] = ()
) -> tuple[bytes, ...]:
    client = Client(peername=("10.0.0.2", 50000), sockname=("10.0.0.1", 8080))
    client.alpn_offers = client_offers
    upstream = Server(address=("api.example", 443))
    upstream.alpn_offers = preset
    with taddons.context() as tctx:
        tctx.options.http2 = http2
        offer_http11(client, upstream)
    return tuple(upstream.alpn_offers)


@pytest.mark.parametrize(
    ("client_offers", "expected"),
    [
        ((b"h2",), (b"h2", b"http/1.1")),  # the defect: an HTTP/1.1-only upstream refused
        ((b"h2", b"http/1.1"), ()),  # left to mitmproxy: it copies the client's list
        ((b"http/1.1",), ()),
        ((), ()),
    ],
)
def test_h2_only_client_gets_http11_offered_upstream(
    client_offers: tuple[bytes, ...], expected: tuple[bytes, ...]
) -> None:
    assert offered(client_offers) == expected


def test_http2_off_is_left_to_mitmproxy() -> None:
    """With `http2` off, mitmproxy's TlsConfig drops `h2` from the copied list itself."""
    assert offered((b"h2",), http2=False) == ()


def test_offers_set_already_are_kept() -> None:
    assert offered((b"h2",), preset=(b"h2",)) == (b"h2",)
