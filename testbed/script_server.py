"""A TLS upstream that answers with exactly the bytes a test scripted (issue 49's attacks).

    python -m testbed.script_server --listen IP:PORT [--cert C --key K] --scripts DIR
        --log FILE --ready FILE

Without `--cert` and `--key` it speaks plain HTTP (the proxy's plain-HTTP path).

Each connection reads a request head (up to CRLF CRLF); its target `/s/NAME...` names the
script `DIR/NAME.json`: a list of steps, run in order:

* `["send", HEX]`: write these bytes (one write, so usually one TLS record or a few);
* `["sleep", S]`: wait S seconds;
* `["drain", S]`: read whatever the proxy sends until it is silent S seconds;
* `["read", N]`: take exactly N bytes (a body of known framing): first what came after
  the head, then from the connection; what follows them is the start of the next head;
* `["close"]`: close (TLS close_notify, then FIN); `["reset"]`: an RST, no close_notify.

A script that neither closes nor resets waits for the next head on the connection (what
was read after a head and not drained is taken as the start of the next one). When the
connection ends, `{"event": "conn", "received": HEX}` logs every byte the proxy sent on it.
For a framing attack this is the upstream's side of the comparison: the tests run the same
script with the body relay off and on and compare what both ends saw, byte for byte.
Standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from pathlib import Path
from typing import Any

from testbed.serving import EventLog, arguments, parse_hostport, run, tls_context, until_stopped

IO_TIMEOUT = 15.0
HEAD_LIMIT = 65536


async def _drain(reader: asyncio.StreamReader, quiet: float) -> bytes:
    got = b""
    while True:
        try:
            data = await asyncio.wait_for(reader.read(65536), quiet)
        except TimeoutError:
            return got
        if not data:
            return got
        got += data


async def _steps(
    steps: list[list[Any]],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    buffer: bytearray,
) -> tuple[bytes, str | None]:
    """Run one script: (what `drain` and `read` read from the connection, how the
    connection ended or None); `read` takes from `buffer` (what followed the head) first."""
    drained = b""
    for step in steps:
        match step:
            case ["read", count]:
                taken = bytes(buffer[: int(count)])
                del buffer[: int(count)]
                if len(taken) < int(count):
                    more = await asyncio.wait_for(
                        reader.readexactly(int(count) - len(taken)), IO_TIMEOUT
                    )
                    drained += more
            case ["send", text]:
                writer.write(bytes.fromhex(text))
                await writer.drain()
            case ["sleep", seconds]:
                await asyncio.sleep(float(seconds))
            case ["drain", seconds]:
                drained += await _drain(reader, float(seconds))
            case ["close"]:
                return drained, "close"
            case ["reset"]:
                return drained, "reset"
            case _:
                raise ValueError(f"unknown step {step!r}")
    return drained, None


async def handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scripts: Path, log: EventLog
) -> None:
    received, buffer, ended = b"", b"", "eof"
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await asyncio.wait_for(reader.read(65536), IO_TIMEOUT)
                if not data or len(buffer) > HEAD_LIMIT:
                    return
                received += data
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            name = target.split("/s/", 1)[1].split("?", 1)[0].split("/", 1)[0]
            steps = json.loads((scripts / f"{name}.json").read_text())
            rest = bytearray(buffer)
            drained, how = await _steps(steps, reader, writer, rest)
            received += drained
            drains = any(step[0] == "drain" for step in steps)
            buffer = b"" if drains and drained else bytes(rest)  # a drained body is no head
            if how is not None:
                ended = how
                return
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        ended = "error"
    finally:
        log.write({"event": "conn", "received": received.hex(), "ended": ended})
        if ended == "reset":
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 2)


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--scripts", required=True)
    args = parser.parse_args(argv)
    log, scripts = EventLog(args.log), Path(args.scripts)
    host, port = parse_hostport(args.listen)
    context = tls_context(args.cert, args.key) if args.cert and args.key else None

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await handle(r, w, scripts, log)

    server = await asyncio.start_server(on_connect, host, port, ssl=context, reuse_address=True)
    await until_stopped(args.ready)
    server.close()
    return 0


if __name__ == "__main__":
    run(main)
