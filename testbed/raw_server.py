"""Raw TCP and UDP stand-ins for the transparent-mode tests: banners, echoes, datagram sinks.

Run inside a network namespace (`ip netns exec NS python -m testbed.raw_server ...`).
Every event is appended as one JSON line to `--log`, flushed before anything is sent
back, so that when a client has seen a reply the record is already on disk:

* `{"event": "connect", "listener", "peer"}` when a TCP connection is accepted;
* `{"event": "data", "listener", "peer", "hex"}` for each chunk a TCP client sent
  (the first 256 bytes of it), which is then echoed back;
* `{"event": "datagram", "listener", "peer", "hex"}` for each UDP datagram received.

`--banner HOST:PORT=TEXT` sends TEXT + CRLF as soon as a connection is accepted (an
SSH-like server speaks first); `--tcp HOST:PORT` only echoes; `--udp HOST:PORT` only
logs. When every listener is bound, the file named by `--ready` is created. SIGTERM
stops it. Uses the standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from testbed.serving import EventLog, arguments, parse_hostport, peer_text, run, until_stopped

IO_TIMEOUT = 30.0


async def handle_tcp(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    listener: str,
    banner: bytes | None,
) -> None:
    peer = peer_text(writer.get_extra_info("peername"))
    log.write({"event": "connect", "listener": listener, "peer": peer})
    try:
        if banner is not None:
            writer.write(banner)
            await writer.drain()
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), IO_TIMEOUT)
            if not chunk:
                return
            log.write(
                {"event": "data", "listener": listener, "peer": peer, "hex": chunk[:256].hex()}
            )
            writer.write(chunk)
            await writer.drain()
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class DatagramSink(asyncio.DatagramProtocol):
    def __init__(self, log: EventLog, listener: str) -> None:
        self.log = log
        self.listener = listener

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.log.write(
            {
                "event": "datagram",
                "listener": self.listener,
                "peer": peer_text(addr),
                "hex": data[:256].hex(),
            }
        )


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--banner", action="append", default=[], metavar="HOST:PORT=TEXT")
    parser.add_argument("--tcp", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--udp", action="append", default=[], metavar="HOST:PORT")
    args = parser.parse_args(argv)

    log = EventLog(args.log)
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    transports: list[asyncio.BaseTransport] = []
    tcp = [
        (spec.split("=", 1)[0], (spec.split("=", 1)[1] + "\r\n").encode()) for spec in args.banner
    ]
    tcp += [(spec, None) for spec in args.tcp]
    for spec, banner in tcp:

        async def on_tcp(
            r: asyncio.StreamReader,
            w: asyncio.StreamWriter,
            _spec: str = spec,
            _banner: bytes | None = banner,
        ) -> None:
            await handle_tcp(r, w, log, _spec, _banner)

        host, port = parse_hostport(spec)
        servers.append(await asyncio.start_server(on_tcp, host, port, reuse_address=True))
    for spec in args.udp:
        transport, _protocol = await loop.create_datagram_endpoint(
            functools.partial(DatagramSink, log, spec), local_addr=parse_hostport(spec)
        )
        transports.append(transport)

    await until_stopped(args.ready)
    for server in servers:
        server.close()
    for each in transports:
        each.close()
    return 0


if __name__ == "__main__":
    run(main)
