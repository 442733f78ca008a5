"""runtime/engine/idlechain.py (D595): once both legs' handshakes are done, an idle
intercepted connection keeps no Python copy of the upstream's certificate chain; OpenSSL's
own copy (what verification used) stays, and the connection still serves.

Real TLS on loopback through the lean engine in this process (tests/runtime/test_idleconn.py's
set-up); the eager case (the client's handshake not done yet) with mitmproxy's own objects.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from mitmproxy import certs, connection
from mitmproxy.proxy import context
from mitmproxy.tls import TlsData
from OpenSSL import SSL

from sandbox_egress.runtime.engine.idlechain import DropUpstreamChainCopy
from sandbox_egress.runtime.engine.lean import LeanOptions, ReleaseIdleTlsBuffers, lean_addons
from tests.runtime.test_idleconn import idle_tunnel

ROOT = Path(__file__).resolve().parents[2]


async def _idle(tmp_path: Path) -> dict[str, Any]:
    async with idle_tunnel(tmp_path) as (master, handler, again):
        (releasing,) = [a for a in master.addons.chain if isinstance(a, ReleaseIdleTlsBuffers)]
        (server,) = [c for c in handler.transports if isinstance(c, connection.Server)]
        kept = {
            "client tls": handler.client.tls_established,
            "server tls": server.tls_established,
            "python copy of the upstream chain": server.certificate_list,
            # the upstream leg's SSL (the client role) is the one with a peer chain
            "openssl's chain on the upstream leg": [
                len(chain)
                for c in releasing.sweeper.connections
                if (chain := c.get_peer_cert_chain())
            ],
            "tls legs": len(releasing.sweeper.connections),
        }
        await again()
        kept["second request"] = "served"
        return kept


def test_an_idle_connection_keeps_no_python_copy_of_the_upstream_chain(tmp_path: Path) -> None:
    assert asyncio.run(_idle(tmp_path)) == {
        "client tls": True,
        "server tls": True,
        "python copy of the upstream chain": (),
        "openssl's chain on the upstream leg": [1],
        "tls legs": 2,
        "second request": "served",
    }


def _established(client_done: bool, tmp_path: Path) -> tuple[Any, ...]:
    store = certs.CertStore.from_store(tmp_path, "mitmproxy", 2048)
    cert = store.get_cert("example.com", []).cert
    client = connection.Client(
        peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), timestamp_start=0
    )
    client.tls = True
    client.timestamp_tls_setup = 1.0 if client_done else None
    server = connection.Server(address=("example.com", 443))
    server.certificate_list = [cert]
    data = TlsData(server, context.Context(client, LeanOptions()), SSL.Connection(
        SSL.Context(SSL.TLS_CLIENT_METHOD)
    ))  # fmt: skip
    DropUpstreamChainCopy().tls_established_server(data)
    return tuple(server.certificate_list)


def test_the_chain_is_kept_while_the_clients_handshake_is_not_done(tmp_path: Path) -> None:
    """`connection_strategy=eager`: the upstream's handshake comes first, and mitmproxy's
    TlsConfig reads the chain when the client's starts (`upstream_cert`)."""
    kept = _established(False, tmp_path)
    assert len(kept) == 1 and kept[0].cn == "example.com"
    assert _established(True, tmp_path / "done") == ()


def test_the_engine_runs_it_and_no_addon_of_the_proxy_reads_the_chain() -> None:
    assert [type(a) for a in lean_addons() if isinstance(a, DropUpstreamChainCopy)] == [
        DropUpstreamChainCopy
    ]
    found = subprocess.run(
        ["grep", "-rln", "--include=*.py", "certificate_list", "addons", "proxy", "runtime",
         "common", "hookrunner"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert found.stdout.split() == ["runtime/engine/idlechain.py"]
