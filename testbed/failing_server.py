"""Upstreams that fail, for the tests of the proxy's `egress_failed` answers (issues 43, 48).

Run inside a network namespace (`ip netns exec NS python -m testbed.failing_server ...`).
Each listener reads what a client sends first (up to one request head), then:

* `--reset HOST:PORT`: resets the connection (`SO_LINGER` 0: an RST, no answer);
* `--close HOST:PORT`: closes it cleanly (a FIN, no answer);
* `--silent HOST:PORT`: never answers, holding the connection until the client closes;
* `--garbage HOST:PORT`: answers bytes that are not HTTP, then closes.

Each accepted connection is logged as `{"event": "accepted", "listener"}` to `--log`.
When every listener is bound, the file named by `--ready` is created. SIGTERM stops it.
Uses the standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import struct
from pathlib import Path

IO_TIMEOUT = 60.0


async def _serve(kind: str, listener: str, log: Path, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:  # fmt: skip
    with log.open("a") as out:
        out.write(json.dumps({"event": "accepted", "listener": listener, "kind": kind}) + "\n")
    with contextlib.suppress(OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT)
    sock = writer.get_extra_info("socket")
    if kind == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif kind == "silent":
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(reader.read(), IO_TIMEOUT)  # until the client goes
    elif kind == "garbage":
        writer.write(b"SSH-2.0-OpenSSH_9.6 not an HTTP answer\r\n")
        with contextlib.suppress(OSError):
            await writer.drain()
    writer.close()


async def main(args: argparse.Namespace) -> None:
    servers = []
    for kind in ("reset", "close", "silent", "garbage"):
        for address in getattr(args, kind) or []:
            host, _, port = address.rpartition(":")

            async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter,
                             kind: str = kind, address: str = address) -> None:  # fmt: skip
                await _serve(kind, address, args.log, r, w)

            servers.append(await asyncio.start_server(handle, host, int(port)))
    args.ready.touch()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--reset", "--close", "--silent", "--garbage"):
        parser.add_argument(flag, action="append", metavar="HOST:PORT")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    asyncio.run(main(parser.parse_args()))
