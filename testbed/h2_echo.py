"""An HTTPS upstream that speaks HTTP/2 (and HTTP/1.1), for the ALPN tests.

Run inside a network namespace (`python -m testbed.h2_echo`). ALPN is offered in the
order given by `--alpn` (the server's preference: it picks the first of its own list that
the client offered). Every event is appended as one JSON line to `--log` before anything is sent:

* `{"event": "tls", "listener", "sni", "alpn"}` after each handshake;
* `{"event": "request", "listener", "version", "path", "headers": [[name, value], ...]}` for
  each request (HTTP/2 pseudo-headers included, in order; over HTTP/2 with `body_len`, the
  request body's size, and `trailers` when the request had some) once it has ended;
* with `--log-heads`, `{"event": "head", "listener", "path"}` as soon as an HTTP/2 request's
  head arrives (the push gate's tests: did anything of a refused request get here?).

Each request is answered 200 with `{"version": ..., "headers": ...}` as its JSON body,
except, over HTTP/2, `/trailers?name=H`: a short body, then trailers echoing header H as
sent, percent-encoded and upper-cased (`x-echoed`, `x-echoed-pct`, `x-echoed-upper`),
which is what a reflecting upstream sends (the redaction tests), and `/reset`: the
stream reset (`INTERNAL_ERROR`) instead of an answer (the failure tests).
When every listener is bound, the file named by `--ready` is created. SIGTERM stops it.
Needs the `h2` package (a mitmproxy dependency, so the test venv has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from urllib.parse import parse_qs, quote, urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from testbed.serving import EventLog, arguments, parse_hostport, run, tls_context, until_stopped

IO_TIMEOUT = 30.0


def trailers_for(headers: list[list[str]]) -> list[tuple[str, str]]:
    path = dict((n, v) for n, v in headers).get(":path", "/")
    wanted = parse_qs(urlsplit(path).query).get("name", [""])[0].lower()
    value = next((v for n, v in headers if n.lower() == wanted), "")
    return [
        ("x-echoed", value),
        ("x-echoed-pct", quote(value, safe="")),
        ("x-echoed-upper", value.upper()),
    ]


def answer(version: str, headers: list[list[str]]) -> bytes:
    return json.dumps({"version": version, "headers": headers}).encode() + b"\n"


async def serve_h2(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    listener: str,
    heads: bool = False,
) -> None:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    )
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    pending: dict[int, list[list[str]]] = {}
    sizes: dict[int, int] = {}
    trailers: dict[int, list[list[str]]] = {}
    while data := await asyncio.wait_for(reader.read(65536), IO_TIMEOUT):
        for event in conn.receive_data(data):
            ended: int | None = None
            if isinstance(event, h2.events.RequestReceived):
                pending[event.stream_id] = [[str(n), str(v)] for n, v in event.headers]
                sizes[event.stream_id] = 0
                if heads:
                    path = dict(pending[event.stream_id]).get(":path", "/")
                    log.write({"event": "head", "listener": listener, "path": path})
                ended = event.stream_id if event.stream_ended is not None else None
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                sizes[event.stream_id] = sizes.get(event.stream_id, 0) + len(event.data)
            elif isinstance(event, h2.events.TrailersReceived):
                trailers[event.stream_id] = [[str(n), str(v)] for n, v in event.headers]
            elif isinstance(event, h2.events.StreamEnded):
                ended = event.stream_id
            if ended is not None and ended in pending:
                headers = pending.pop(ended)
                path = dict((n, v) for n, v in headers).get(":path", "/")
                record = {"event": "request", "listener": listener, "version": "h2",
                          "path": path, "headers": headers, "body_len": sizes.pop(ended, 0)}  # fmt: skip
                if ended in trailers:
                    record["trailers"] = trailers.pop(ended)
                log.write(record)
                if urlsplit(path).path == "/reset":  # the stream reset, no answer
                    conn.reset_stream(ended, h2.errors.ErrorCodes.INTERNAL_ERROR)
                    continue
                if urlsplit(path).path == "/trailers":
                    conn.send_headers(ended, [(":status", "200"), ("content-type", "text/plain")])
                    conn.send_data(ended, b"trailers follow\n")
                    conn.send_headers(ended, trailers_for(headers), end_stream=True)
                    continue
                body = answer("h2", headers)
                conn.send_headers(
                    ended,
                    [(":status", "200"), ("content-type", "application/json"),
                     ("content-length", str(len(body)))],
                )  # fmt: skip
                conn.send_data(ended, body, end_stream=True)
        writer.write(conn.data_to_send())
        await writer.drain()


async def serve_http1(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: EventLog, listener: str
) -> None:
    while True:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        headers = [
            [n, v.strip()] for n, _, v in (line.partition(":") for line in lines[1:] if line)
        ]
        log.write(
            {"event": "request", "listener": listener, "version": "http/1.1", "headers": headers}
        )
        body = answer("http/1.1", headers)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()


async def handle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    listener: str,
    tls: ssl.SSLContext,
    heads: bool = False,
) -> None:
    try:
        await asyncio.wait_for(writer.start_tls(tls), IO_TIMEOUT)
        ssl_object = writer.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object else None
        sni = getattr(ssl_object, "egt_sni", None)
        log.write({"event": "tls", "listener": listener, "sni": sni, "alpn": alpn})
        if alpn == "h2":
            await serve_h2(reader, writer, log, listener, heads)
        else:
            await serve_http1(reader, writer, log, listener)
    except (OSError, ssl.SSLError, ValueError, TimeoutError, asyncio.IncompleteReadError):
        pass
    except h2.exceptions.ProtocolError:
        pass  # a test that sends what HTTP/2 forbids gets the connection closed
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--alpn", default="h2,http/1.1", help="server preference, comma-separated")
    parser.add_argument("--log-heads", action="store_true", help="log each HTTP/2 head on arrival")
    args = parser.parse_args(argv)

    log = EventLog(args.log)
    tls = tls_context(args.cert, args.key, args.alpn.split(","))
    host, port = parse_hostport(args.listen)

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await handle(r, w, log, args.listen, tls, args.log_heads)

    server = await asyncio.start_server(on_connect, host, port)
    await until_stopped(args.ready)
    server.close()
    return 0


if __name__ == "__main__":
    run(main)
