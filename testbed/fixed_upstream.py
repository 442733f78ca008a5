"""An upstream that answers every request head it reads with the same bytes (asyncio).

`start_lean_engine` runs the lean engine alone (no policy) on a free loopback port for them.

For measurements through a real engine on loopback (tests/proxy/test_coalesce.py counts
writes per request, bench/connmem.py memory per idle connection): a request is its head
and a `Content-Length` body if it has one, and the answer is written through the
transport in one call.
`server_context` is its TLS: a `localhost` certificate made by mitmproxy's own cert store
(RSA 2048), which the engine under test does not verify (`ssl_insecure`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mitmproxy import certs


def server_context(directory: Path) -> ssl.SSLContext:
    """A server context for `localhost`; its files are written below `directory`."""
    store = certs.CertStore.from_store(directory / "up", "up", 2048)
    entry = store.get_cert("localhost", [])
    assert entry.privatekey is not None
    key = entry.privatekey.private_bytes(
        certs.serialization.Encoding.PEM,
        certs.serialization.PrivateFormat.TraditionalOpenSSL,
        certs.serialization.NoEncryption(),
    )
    (directory / "up.pem").write_bytes(entry.cert.to_pem() + key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "up.pem")
    return context


async def start_lean_engine(
    confdir: Path | str, prepare: Callable[[Any], None] | None = None
) -> tuple[Any, asyncio.Task[None], int]:
    """The lean engine (runtime/engine/lean.py) listening on a free loopback port, upstreams not
    verified: its master, the task running it and the port. `prepare(master)` runs before
    it starts; stop it with `master.shutdown()` and await the task."""
    from sandbox_egress.runtime.engine.lean import LeanMaster, LeanOptions

    opts = LeanOptions()
    master = LeanMaster(opts)
    opts.update(
        listen_host="127.0.0.1", listen_port=0, confdir=str(confdir),
        ssl_insecure=True, connection_strategy="lazy",
    )  # fmt: skip
    if prepare is not None:
        prepare(master)
    running = asyncio.create_task(master.run())
    server = master.addons.get("proxyserver")
    for _ in range(500):
        if server.listen_addrs() or running.done():
            break
        await asyncio.sleep(0.02)
    if not server.listen_addrs():
        raise RuntimeError("the lean engine did not start listening within 10 s")
    return master, running, server.listen_addrs()[0][1]


class FixedResponse(asyncio.Protocol):
    """Answers each whole request (head, and its `Content-Length` body if any) with
    `response`; `FixedResponse.serving(response)` is the factory `loop.create_server` takes."""

    def __init__(self, response: bytes) -> None:
        self.response, self.buffer = response, b""

    @classmethod
    def serving(cls, response: bytes) -> Any:
        return lambda: cls(response)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, rest = self.buffer.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.transport.write(self.response)
