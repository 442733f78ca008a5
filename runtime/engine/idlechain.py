"""An upstream leg drops mitmproxy's Python copy of the upstream's certificate chain once
nothing can read it (issue 49, D595).

When the TLS handshake with an upstream completes, mitmproxy's TLS layer parses every
certificate of the upstream's chain into a `certs.Cert` (a `cryptography` certificate
holding its DER bytes and parsed fields) and keeps the list on the `Server` connection
(`certificate_list`) for the connection's life: about 2.1 KB per certificate of 1 KB DER
(1.9 KB of malloc and 17 Python blocks, measured over certifi's roots), 2-4 certificates for
a public upstream, on every idle intercepted connection. OpenSSL keeps
its own copy in the `SSL` session; the Python copy is what mitmproxy's `TlsConfig` reads
to make the certificate it presents to the client (`upstream_cert`) and to extend the
client's chain (`add_upstream_certs_to_client_chain`), both in `tls_start_client`, which
runs once per client connection, when the client's handshake starts.

`DropUpstreamChainCopy` empties the list (mitmproxy's default, `()`) in
`tls_established_server` when the client's TLS handshake on the same connection is already
done: `tls_start_client` has run and will not run again for it. That is always so under
the proxy's `connection_strategy=lazy` (the upstream is dialled after the request is
decided); under `eager` or with a client that does not speak TLS the list is kept.

Invariants: certificate verification (OpenSSL's, during the handshake) and SNI are not
touched; the `SSL` object keeps the chain (`get_peer_cert_chain` still answers it);
no addon of the proxy reads `certificate_list` (pinned by tests/runtime/test_idlechain.py's
grep of the tree).
"""

from __future__ import annotations

from mitmproxy.tls import TlsData


class DropUpstreamChainCopy:
    """Empties `server.certificate_list` once both legs' handshakes are done (D595)."""

    def tls_established_server(self, tls_start: TlsData) -> None:
        if tls_start.context.client.tls_established and tls_start.conn.certificate_list:
            tls_start.conn.certificate_list = ()
