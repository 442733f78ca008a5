"""The ALPN offers of an upstream connection, set before its TLS handshake (D82, D305)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from mitmproxy.connection import Client, Server
from mitmproxy.test import taddons

from sandbox_egress.addons.pinning import offer_upstream


def offered(
    client_offers: Sequence[bytes], http2: bool = True, preset: Sequence[bytes] = ()
) -> tuple[bytes, ...]:
    client = Client(peername=("10.0.0.2", 50000), sockname=("10.0.0.1", 8080))
    client.alpn_offers = client_offers
    upstream = Server(address=("api.example", 443))
    upstream.alpn_offers = preset
    with taddons.context() as tctx:
        tctx.options.http2 = http2
        offer_upstream(client, upstream)
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


def test_http2_off_offers_no_h2() -> None:
    """With `http2` off, `h2` is not offered (mitmproxy's TlsConfig drops it too)."""
    assert offered((b"h2",), http2=False) == ()
    assert offered((b"h2", b"http/1.1"), http2=False) == (b"http/1.1",)


@pytest.mark.parametrize("http2", [True, False])
def test_http3_names_are_never_offered_over_tcp(http2: bool) -> None:
    assert offered((b"h3", b"http/1.1"), http2=http2) == (b"http/1.1",)
    assert offered((b"h3",), http2=http2) == (b"http/1.1",)


def test_offers_set_already_are_kept() -> None:
    assert offered((b"h2",), preset=(b"h2",)) == (b"h2",)
