"""An HTTP/2-only TLS upstream that echoes a request header back in the response *trailers*.

Run as a script inside a network namespace (`ip netns exec NS python h2_echo_server.py ...`).
For every request stream it answers `:status 200`, a short body, then trailers:
`x-echoed: <value of H>`, `x-echoed-pct: <percent-encoded>`, `x-echoed-upper: <upper-cased>`
where H is the `name` query parameter of `:path` (the redaction of trailers is tested on
what a reflecting upstream sends). Each request is logged as one JSON line
`{"event": "request", "headers": [[name, value], ...], "path"}` before it is answered.
When listening, `--ready` is created; SIGTERM stops it. Needs the `h2` library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
import sys
from urllib.parse import parse_qs, quote, urlsplit

import h2.config
import h2.connection
import h2.events
import h2.exceptions

IO_TIMEOUT = 30.0


def trailers_for(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    path = dict(headers).get(":path", "/")
    wanted = parse_qs(urlsplit(path).query).get("name", [""])[0].lower()
    value = next((v for n, v in headers if n.lower() == wanted), "")
    return [
        ("x-echoed", value),
        ("x-echoed-pct", quote(value, safe="")),
        ("x-echoed-upper", value.upper()),
    ]


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log_path: str) -> None:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    )
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    try:
        while data := await asyncio.wait_for(reader.read(65536), IO_TIMEOUT):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = [(str(n), str(v)) for n, v in event.headers]
                    record = {"event": "request", "headers": headers}
                    record["path"] = dict(headers).get(":path")
                    with open(log_path, "a", encoding="utf-8") as log:
                        log.write(json.dumps(record) + "\n")
                    stream = event.stream_id
                    conn.send_headers(stream, [(":status", "200"), ("content-type", "text/plain")])
                    conn.send_data(stream, b"trailers follow\n")
                    conn.send_headers(stream, trailers_for(headers), end_stream=True)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return
            writer.write(conn.data_to_send())
            await writer.drain()
    except (OSError, TimeoutError, ssl.SSLError, h2.exceptions.ProtocolError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(["h2"])
    host, _, port = args.listen.rpartition(":")

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await serve(r, w, args.log)

    server = await asyncio.start_server(on_client, host, int(port), ssl=ctx)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    with open(args.ready, "w", encoding="utf-8") as ready:
        ready.write("ready\n")
    await stop.wait()
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
