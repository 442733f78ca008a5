"""Raw TCP and UDP stand-ins for the transparent-mode tests: banners, echoes, datagram sinks.

Run as a script inside a network namespace (`ip netns exec NS python raw_server.py ...`).
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

import argparse
import asyncio
import contextlib
import functools
import json
import signal
import sys
from typing import Any

IO_TIMEOUT = 30.0


class EventLog:
    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()


def parse_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def fmt_peer(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if peer else "?"


async def handle_tcp(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    listener: str,
    banner: bytes | None,
) -> None:
    peer = fmt_peer(writer.get_extra_info("peername"))
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
                "peer": fmt_peer(addr),
                "hex": data[:256].hex(),
            }
        )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True)
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

    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    with open(args.ready, "w", encoding="utf-8") as ready:
        ready.write("ready\n")
    await stop.wait()
    for server in servers:
        server.close()
    for each in transports:
        each.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
