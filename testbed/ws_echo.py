"""A WebSocket echo upstream over TLS for the client suite (the `websockets` library).

Run as a script inside a network namespace. Each upgrade request is one JSON line in
`--log` (`{"event": "upgrade", "path", "headers": [[name, value], ...]}`, headers in wire
order, written before the handshake is answered); each message is echoed back unchanged.
The file named by `--ready` is created once it listens. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request


class EventLog:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    log = EventLog(args.log)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    host, _, port = args.listen.rpartition(":")

    def record(_connection: ServerConnection, request: Request) -> None:
        headers = [[name, value] for name, value in request.headers.raw_items()]
        log.write({"event": "upgrade", "path": request.path, "headers": headers})

    async def echo(connection: ServerConnection) -> None:
        async for message in connection:
            await connection.send(message)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with serve(echo, host, int(port), ssl=tls, process_request=record):
        with open(args.ready, "w", encoding="utf-8") as ready:
            ready.write("ready\n")
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
