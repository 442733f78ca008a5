"""A client's TLS handshake never picks an HTTP/3 name over TCP (issue 36, D305).

mitmproxy answers a client's ALPN offer with `tlsconfig.alpn_select_callback`: without an
upstream choice yet (lazy connections, D19) it takes the client's first HTTP name, and
`h3` is one of them. Over TCP, a client that offers `h3` (no real one does; a sandbox may)
would then send its connection to mitmproxy's HTTP/3 layers, which a TCP proxy does not
load (D297): the connection crashed and was left open with no answer. `install()` makes
every client context mitmproxy builds from then on choose among the other names; with
none left, no protocol is chosen and the client speaks HTTP/1.1. The upstream is never
offered such a name either (`proxy.stages.upstream_offers`).
"""

from __future__ import annotations

from typing import Any

from mitmproxy.addons import tlsconfig
from OpenSSL import SSL

from sandbox_egress.proxy.stages import http3_name

ORIGINAL_SELECT = tlsconfig.alpn_select_callback


def select(conn: SSL.Connection, options: list[bytes]) -> Any:
    """mitmproxy's choice among `options` without HTTP/3's names."""
    tcp = [name for name in options if not http3_name(name)]
    if not tcp:
        return SSL.NO_OVERLAPPING_PROTOCOLS
    return ORIGINAL_SELECT(conn, tcp)


def install() -> None:
    """Before the first client context is made (TlsConfig reads the name at each build)."""
    tlsconfig.alpn_select_callback = select
