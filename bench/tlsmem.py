"""OpenSSL's memory per idle TLS connection, per leg (issue 36, D309).

`python -m bench.tlsmem [--pairs 300]`, no root, no network: pyOpenSSL connections in this
process over memory BIOs, as mitmproxy runs them. Each pair is a server `SSL` (the
client-facing leg: the engine's certificate and key, shared as runtime/engine/tlsshare.py does)
and a client `SSL` (the upstream leg), a TLS 1.3 handshake, one small request and response,
then runtime/engine/idlebios.py's release of the memory BIOs. The figure is glibc's malloc in use
(testbed.heap) per kept object, after `WARMUP` pairs, for:

* `fresh`: the two `SSL` objects before any handshake;
* `server` / `client` / `pair`: one leg, or both, idle after the exchange;
* `pair without release-buffers`: without `SSL_MODE_RELEASE_BUFFERS` (D144);
* `pair with secp256r1`: the key exchange without the post-quantum hybrid (what it costs;
  the engine keeps OpenSSL's default, D309).

Issue 49's candidates (D596), each against `pair` or `pair, upstream tickets`:

* `pair, upstream tickets`: the server leg sends OpenSSL's two TLS 1.3 tickets, as most
  upstreams do, so the client leg keeps the last one in its session;
* `pair, upstream tickets, client no-ticket`: the client leg with `SSL_OP_NO_TICKET`;
* `pair, free buffers`: `SSL_free_buffers` on both legs once the exchange is read;
* `pair, server cache off`: the server leg's context without OpenSSL's session cache.

Each variant runs in a child process of its own, so one does not reuse another's freed heap.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import tempfile
from typing import Any

WARMUP = 10
VARIANTS = {
    "fresh": ("pair", "nohandshake"),
    "server": ("server",),
    "client": ("client",),
    "pair": ("pair",),
    "pair without release-buffers": ("pair", "norelease"),
    "pair with secp256r1": ("pair", "p256"),
    "pair, upstream tickets": ("pair", "tickets"),
    "pair, upstream tickets, client no-ticket": ("pair", "tickets", "clientnoticket"),
    "pair, free buffers": ("pair", "freebuffers"),
    "pair, server cache off": ("pair", "cacheoff"),
}


def _pump(one: Any, other: Any) -> None:
    """Step both handshakes and move what each wrote to the other until nothing moves."""
    from OpenSSL import SSL

    for _ in range(20):
        for conn in (one, other):
            with contextlib.suppress(SSL.WantReadError):
                conn.do_handshake()
        moved = False
        for source, sink in ((one, other), (other, one)):
            try:
                sink.bio_write(source.bio_read(65536))
                moved = True
            except SSL.WantReadError:
                pass
        if not moved:
            return


def _free_buffers() -> Any:
    """OpenSSL's `SSL_free_buffers` (not in the cffi bindings), placed as
    runtime/engine/tickets.py places its two functions."""
    import ctypes
    from pathlib import Path

    from cryptography.hazmat.bindings import _rust
    from cryptography.hazmat.bindings._rust import _openssl

    from sandbox_egress.runtime.engine import tickets

    anchor = "SSL_new"
    values = tickets.symbol_values(
        Path(_rust.__file__ or ""), ("_cffi_d_" + anchor, "SSL_free_buffers")
    )
    base = (
        tickets._address(_openssl.ffi.addressof(_openssl.lib, anchor)) - values["_cffi_d_" + anchor]
    )
    return ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(base + values["SSL_free_buffers"])


def measure(flags: tuple[str, ...], pairs: int) -> dict[str, Any]:
    """Malloc in use per kept pair or `SSL` object (this process) for one variant."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from mitmproxy import certs
    from OpenSSL import SSL, crypto
    from OpenSSL._util import ffi
    from OpenSSL._util import lib as ssl_lib

    from sandbox_egress.runtime.engine import idlebios, tickets
    from testbed.heap import malloc_in_use

    store = certs.CertStore.from_store(tempfile.mkdtemp(prefix="tlsmem-"), "mitmproxy", 2048)
    entry = store.get_cert("example.com", [])
    cert = crypto.X509.from_cryptography(entry.cert.to_cryptography())
    key = crypto.PKey.from_cryptography_key(entry.privatekey)
    server_ctx, client_ctx = SSL.Context(SSL.TLS_SERVER_METHOD), SSL.Context(SSL.TLS_CLIENT_METHOD)
    for ctx in (server_ctx, client_ctx):
        if "norelease" not in flags:
            ctx.set_mode(SSL.MODE_RELEASE_BUFFERS)
        if "p256" in flags:
            ctx.set_tmp_ecdh(ec.SECP256R1())
    if "clientnoticket" in flags:
        client_ctx.set_options(SSL.OP_NO_TICKET)
    if "cacheoff" in flags:
        server_ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    free_buffers = _free_buffers() if "freebuffers" in flags else None
    no_tickets = tickets.resolve()
    kept: list[Any] = []
    group = ""

    def one() -> None:
        nonlocal group
        server = SSL.Connection(server_ctx, None)
        ssl_lib.SSL_use_certificate(server._ssl, cert._x509)
        ssl_lib.SSL_use_PrivateKey(server._ssl, key._pkey)
        if no_tickets is not None and "tickets" not in flags:
            no_tickets.set(server, 0)  # as the engine does (D301)
        server.set_accept_state()
        client = SSL.Connection(client_ctx, None)
        client.set_connect_state()
        if "nohandshake" not in flags:
            _pump(client, server)
            client.send(b"GET / HTTP/1.1\r\n\r\n")
            _pump(client, server)
            server.recv(1024)
            server.send(b"HTTP/1.1 204 No Content\r\n\r\n")
            _pump(client, server)
            client.recv(1024)
            if free_buffers is not None:
                for leg in (server, client):
                    free_buffers(tickets._address(leg._ssl))
            idlebios.release(server)
            idlebios.release(client)
            group = ffi.string(ssl_lib.SSL_get0_group_name(server._ssl)).decode()
        kept.append(
            server if "server" in flags else client if "client" in flags else (server, client)
        )

    for _ in range(WARMUP):
        one()
    gc.collect()
    before = malloc_in_use()
    for _ in range(pairs):
        one()
    gc.collect()
    objects = 2 if "pair" in flags else 1
    return {"group": group, "bytes": round((malloc_in_use() - before) / pairs), "ssl": objects}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tlsmem", description=__doc__)
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(measure(VARIANTS[args.variant], args.pairs)))
        return 0
    for name in VARIANTS:
        found = subprocess.run(
            [sys.executable, "-m", "bench.tlsmem", "--variant", name, "--pairs", str(args.pairs)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        result = json.loads(found.stdout)
        unit = "pair" if result["ssl"] == 2 else "SSL "
        print(f"{name:42s} {result['bytes']:7d} bytes per {unit}  {result['group']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
