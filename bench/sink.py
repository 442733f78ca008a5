"""An HTTPS upload sink for the memory scenario: reads each request body and discards it.

Run inside the upstream namespace: `python sink.py --listen HOST:PORT --cert C --key K`.
Answers `200` with the number of body bytes it read, only after reading all of them
(nginx answers a `return` before it has read the body, which a streaming proxy then
has to race). Content-Length and chunked bodies; reads in 1 MiB chunks, keeps none.
Standard library only; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys

CHUNK = 1 << 20


async def read_body(reader: asyncio.StreamReader, head: bytes) -> int:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        total = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return total
            remaining = size
            while remaining:
                remaining -= len(await reader.read(min(remaining, CHUNK)))
            await reader.readexactly(2)
            total += size
    remaining = length = int(headers.get("content-length", "0"))
    while remaining:
        chunk = await reader.read(min(remaining, CHUNK))
        if not chunk:
            raise ConnectionError("short body")
        remaining -= len(chunk)
    return length


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            received = await read_body(reader, head)
            body = f"{received}\n".encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
    except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(args.cert, args.key)
    server = await asyncio.start_server(
        handle, host, int(port), ssl=context, limit=CHUNK, reuse_address=True
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
