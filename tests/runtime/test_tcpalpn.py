"""A client's TLS handshake never picks an HTTP/3 name over TCP (D305)."""

from __future__ import annotations

import pytest
from mitmproxy.addons import tlsconfig
from OpenSSL import SSL

from sandbox_egress.runtime.engine import tcpalpn


def chosen(options: list[bytes], server_alpn: bytes | None = None) -> object:
    conn = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD))
    conn.set_app_data(tlsconfig.AppData(client_alpn=None, server_alpn=server_alpn, http2=True))
    return tcpalpn.select(conn, options)


@pytest.mark.parametrize(
    ("options", "server_alpn", "expected"),
    [
        ([b"h3", b"http/1.1"], None, b"http/1.1"),  # mitmproxy's own: b"h3"
        ([b"h3", b"h2", b"http/1.1"], None, b"h2"),
        ([b"h3-29", b"h3"], None, SSL.NO_OVERLAPPING_PROTOCOLS),
        ([b"h3"], b"http/1.1", SSL.NO_OVERLAPPING_PROTOCOLS),
        ([b"h2", b"http/1.1"], b"http/1.1", b"http/1.1"),  # the upstream's choice, as before
        ([b"http/1.1", b"h2"], None, b"http/1.1"),
    ],
)
def test_select(options: list[bytes], server_alpn: bytes | None, expected: object) -> None:
    assert chosen(options, server_alpn) == expected


def test_mitmproxys_own_choice_is_h3_first() -> None:
    """What the wrapper prevents: mitmproxy's callback takes a client's first HTTP name."""
    conn = SSL.Connection(SSL.Context(SSL.TLS_SERVER_METHOD))
    conn.set_app_data(tlsconfig.AppData(client_alpn=None, server_alpn=None, http2=True))
    assert tcpalpn.ORIGINAL_SELECT(conn, [b"h3", b"http/1.1"]) == b"h3"


def test_install_replaces_the_name_tlsconfig_builds_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tlsconfig, "alpn_select_callback", tcpalpn.ORIGINAL_SELECT)
    tcpalpn.install()
    assert tlsconfig.alpn_select_callback is tcpalpn.select
