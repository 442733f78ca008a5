"""A WebSocket echo upstream over TLS for the client suite (the `websockets` library).

Run inside a network namespace (`python -m testbed.ws_echo`). Each upgrade request is one
JSON line in `--log` (`{"event": "upgrade", "path", "headers": [[name, value], ...]}`,
headers in wire order, written before the handshake is answered); each message is echoed
back unchanged. On `/echo-header?name=H` it first sends the value of request header H
inside a text message, then inside a binary one (a reflecting server, the redaction tests).
The file named by `--ready` is created once it listens. SIGTERM stops it.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request

from testbed.serving import EventLog, arguments, parse_hostport, run, tls_context, until_stopped


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    log = EventLog(args.log)
    tls = tls_context(args.cert, args.key)
    host, port = parse_hostport(args.listen)

    def record(_connection: ServerConnection, request: Request) -> None:
        headers = [[name, value] for name, value in request.headers.raw_items()]
        log.write({"event": "upgrade", "path": request.path, "headers": headers})

    async def echo(connection: ServerConnection) -> None:
        upgrade = urlsplit(connection.request.path if connection.request else "/")
        if upgrade.path == "/echo-header":  # a server that reflects a request header
            wanted = parse_qs(upgrade.query).get("name", [""])[0]
            value = connection.request.headers.get(wanted, "") if connection.request else ""
            await connection.send(f"text before;{value};after")
            await connection.send(f"binary before;{value};after".encode())
        async for message in connection:
            await connection.send(message)

    async with serve(echo, host, port, ssl=tls, process_request=record):
        await until_stopped(args.ready)
    return 0


if __name__ == "__main__":
    run(main)
