"""What the test servers of testbed/ share: the event log, the command line, ready and stop.

The servers (echo_server, bulk_server, raw_server, hostile_server, ws_echo, h2_echo) run
as `python -m testbed.<name> --log FILE --ready FILE ...`, usually inside a network
namespace a test created, with the repository as the working directory. Each keeps:

* every event appended to `--log` as one JSON line, flushed before anything is sent back,
  so that when a client has its answer the record is already on disk (`EventLog`; safe
  to share between the threads of bulk_server);
* the file named by `--ready` created once every listener is bound, and SIGTERM or
  SIGINT stopping it (`until_stopped`, or `until_stopped_blocking` for a threaded server).

Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EventLog:
    """`--log`: one JSON line per event, flushed at once."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the required `--log` and `--ready`, described by `doc`'s first line;
    the server adds its own listeners."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True)
    return parser


def parse_hostport(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` as (host, port)."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def peer_text(peer: Any) -> str:
    """A socket's peer address as `HOST:PORT` or `[V6]:PORT` ("?" when it has none)."""
    if not peer:
        return "?"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tls_context(cert: str, key: str, alpn: list[str] | None = None) -> ssl.SSLContext:
    """A server context offering `alpn` (in this order of preference); the SNI a client
    sent is kept on its SSL object as `egt_sni`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    if alpn:
        context.set_alpn_protocols(alpn)

    def remember_sni(ssl_object: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        ssl_object.egt_sni = server_name

    context.sni_callback = remember_sni
    return context


def _announce_ready(path: str) -> None:
    with open(path, "w", encoding="utf-8") as ready:
        ready.write("ready\n")


async def until_stopped(ready: str) -> None:
    """Create `ready`, then return at the first SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    _announce_ready(ready)
    await stop.wait()


def until_stopped_blocking(ready: str) -> None:
    """`until_stopped` for a server whose listeners run in threads (the main thread waits)."""
    stop = threading.Event()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda *_: stop.set())
    _announce_ready(ready)
    while not stop.wait(3600):
        pass


def run(main: Callable[[list[str]], Awaitable[int]]) -> NoReturn:
    """Run an asyncio server's `main` on the command line's arguments, exit with its code."""

    async def started() -> int:
        return await main(sys.argv[1:])

    sys.exit(asyncio.run(started()))
