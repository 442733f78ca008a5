"""Upstream stand-ins for the end-to-end tests: HTTP(S) echo listeners and trap listeners.

Run inside a network namespace (`ip netns exec NS python -m testbed.echo_server ...`;
testbed/serving.py says what every test server shares).
Every event is appended as one JSON line to `--log`, flushed before anything is sent
back, so that when a client has its response the record is already on disk:

* `{"event": "connect", "listener", "peer", "tls"}` when a TCP connection is accepted;
* `{"event": "tls", "listener", "peer", "sni", "alpn"}` after a TLS handshake;
* `{"event": "request", "listener", "peer", "tls", "sni", "method", "target", "version",
  "headers": [[name, value], ...], "body_len", "head_b64"}` for each HTTP/1.1 request,
  headers in wire order with their original casing and duplicates, and the request head
  exactly as received (base64, up to and including the blank line);
* `{"event": "trap", "listener", "peer"}` for a connection to a trap listener, which is
  closed at once (the proxy must never reach one).

An echo answers 200 with the request record as its JSON body. Special paths:
* `/echo-header?name=H`: the response also carries `X-Echoed: <value of H>` and
  `X-Echoed-Embedded: before;<value of H>;after` (the proxy must redact injected values);
* `/echo-reason?name=H`: a 401 whose reason phrase carries the value of H;
* `/echo-switch?name=H`: a `101 Switching Protocols` to a request that asked for no
  upgrade, then the value of H as raw bytes (a protocol switch the proxy must not relay
  unscanned);
* `/echo-header-name?name=H`: the response also carries a field named `X-Echo-<value of H>`;
* `/fake-denied`: the response carries the upstream's own `X-Egress-Denied: fake`
  (the proxy must strip it);
* `/echo-location?name=H&enc=E`: a 302 whose `Location` carries the value of H encoded
  as E (`pct`, `pct-lower`, `pct-lowhex`, `form`, `upper`, `lower`, `b64`, `b64url`,
  `json-slash`, `json-u`, `html`, `html-39`, `raw`), as a redirecting upstream
  would reflect it;
* `/echo-body?name=H&chunk=N&frame=F&enc=E&sse=1`: a 200 whose body carries the value of
  H (encoded as E, as for `/echo-location`, default `raw`), sent in N-byte pieces: HTTP
  chunks when F is `chunked` (the default), or writes under a Content-Length when F is
  `length`; with `sse=1` a `text/event-stream` whose first event's data is that body.

When every listener is bound, the file named by `--ready` is created. SIGTERM stops it.
Uses the standard library only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import html
import json
import re
import socket
import ssl
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

from testbed.serving import (
    EventLog,
    arguments,
    parse_hostport,
    peer_text,
    run,
    tls_context,
    until_stopped,
)

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
IO_TIMEOUT = 30.0


def bound_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6 and host == "::":
        # One trap on [::] then also catches every IPv4 destination on that port.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind((host, port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


async def read_body(reader: asyncio.StreamReader, headers: list[list[str]]) -> int:
    lower = {name.lower(): value for name, value in headers}
    if "chunked" in lower.get("transfer-encoding", "").lower():
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return total
            total += size
            if total > MAX_BODY:
                raise ValueError("body too large")
            await reader.readexactly(size)
            await reader.readexactly(2)
    length = int(lower.get("content-length", "0") or "0")
    if length > MAX_BODY:
        raise ValueError("body too large")
    remaining = length
    while remaining:
        chunk = await reader.read(min(remaining, 65536))
        if not chunk:
            raise ConnectionError("short body")
        remaining -= len(chunk)
    return length


ECHO_ENCODINGS: dict[str, Any] = {
    "pct": lambda v: quote(v, safe=""),
    "pct-lower": lambda v: quote(v, safe="").lower(),
    "form": quote_plus,
    "upper": str.upper,
    "lower": str.lower,
    "b64": lambda v: base64.b64encode(v.encode()).decode(),
    "b64url": lambda v: base64.urlsafe_b64encode(v.encode()).decode().rstrip("="),
    "json-slash": lambda v: json.dumps(v)[1:-1].replace("/", "\\/"),  # PHP's json_encode
    "json-u": lambda v: "".join(f"\\u{ord(c):04X}" if c in '"\\/' else c for c in v),
    "pct-lowhex": lambda v: re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(v, safe="")),
    "raw": lambda v: v,
    "html": html.escape,  # a page's template (Python, Django)
    "html-39": lambda v: html.escape(v).replace("&#x27;", "&#39;").replace("&quot;", "&#34;"),
}


def header_value(record: dict[str, Any], query: dict[str, list[str]]) -> str:
    wanted = query.get("name", [""])[0].lower()
    return next((v for n, v in record["headers"] if n.lower() == wanted), "")


def echo_location(record: dict[str, Any], query: dict[str, list[str]]) -> bytes:
    encoded = ECHO_ENCODINGS[query.get("enc", ["pct"])[0]](header_value(record, query))
    return (
        "HTTP/1.1 302 Found\r\nContent-Length: 0\r\n"
        f"Location: https://cb.test/back?token={encoded}&next=%2Fhome\r\n\r\n"
    ).encode("latin-1")


def echo_body(record: dict[str, Any], query: dict[str, list[str]]) -> list[bytes]:
    """The head, then the body's pieces as they are to be written one by one."""
    echoed = ECHO_ENCODINGS[query.get("enc", ["raw"])[0]](header_value(record, query))
    body = b'{"pad": "' + b"p" * 61 + b'", "echoed": "' + echoed.encode()
    body += b'", "tail": "' + b"t" * 70 + b'"}'
    kind = "application/json"
    if query.get("sse", ["0"])[0] == "1":
        body, kind = b"data: " + body + b"\n\ndata: [DONE]\n\n", "text/event-stream"
    size = int(query.get("chunk", ["7"])[0])
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n"
    if query.get("frame", ["chunked"])[0] == "length":
        return [f"{head}Content-Length: {len(body)}\r\n\r\n".encode(), *pieces]
    chunks = [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces]
    return [f"{head}Transfer-Encoding: chunked\r\n\r\n".encode(), *chunks, b"0\r\n\r\n"]


def echo_compressed(record: dict[str, Any], query: dict[str, list[str]]) -> bytes:
    """The echo body gzip-compressed when the request accepts gzip, or always with
    `force=1` (an upstream that ignores `Accept-Encoding`); identity otherwise. With
    `te=1` the body is gzip-compressed as a transfer coding instead (`Transfer-Encoding:
    gzip, chunked`, RFC 9112 6.1), whatever the request accepts."""
    body = b'{"echoed": "' + header_value(record, query).encode() + b'"}'
    accepted = ",".join(v for n, v in record["headers"] if n.lower() == "accept-encoding")
    head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    if query.get("te", ["0"])[0] == "1":
        packed = gzip.compress(body)
        return (
            f"{head}Transfer-Encoding: gzip, chunked\r\n\r\n".encode()
            + b"%x\r\n%s\r\n0\r\n\r\n"
            % (
                len(packed),
                packed,
            )
        )
    if "gzip" in accepted.lower() or query.get("force", ["0"])[0] == "1":
        body = gzip.compress(body)
        head += "Content-Encoding: gzip\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def response_for(record: dict[str, Any]) -> bytes | list[bytes]:
    extra: list[tuple[str, str]] = []
    parts = urlsplit(record["target"])
    if parts.path == "/echo-location":
        return echo_location(record, parse_qs(parts.query))
    if parts.path == "/echo-body":
        return echo_body(record, parse_qs(parts.query))
    if parts.path == "/echo-compressed":
        return echo_compressed(record, parse_qs(parts.query))
    if parts.path == "/echo-reason":  # the value in the status line's reason phrase
        value = header_value(record, parse_qs(parts.query))
        return f"HTTP/1.1 401 Bad key {value}\r\nContent-Length: 0\r\n\r\n".encode("latin-1")
    if parts.path == "/echo-switch":  # a 101 nobody asked for, then raw bytes
        value = header_value(record, parse_qs(parts.query))
        return (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"
            f"raw before;{value};after"
        ).encode("latin-1")
    if parts.path == "/echo-header":
        wanted = parse_qs(parts.query).get("name", [""])[0].lower()
        for name, value in record["headers"]:
            if name.lower() == wanted:
                extra.append(("X-Echoed", value))
                extra.append(("X-Echoed-Embedded", f"before;{value};after"))
                break
    elif parts.path == "/echo-header-name":  # the value as a header's name
        wanted = parse_qs(parts.query).get("name", [""])[0].lower()
        for name, value in record["headers"]:
            if name.lower() == wanted:
                extra.append((f"X-Echo-{value}", "1"))
                break
    elif parts.path == "/fake-denied":
        extra.append(("X-Egress-Denied", "fake"))
    body = json.dumps(record).encode()
    head = [
        "HTTP/1.1 200 OK",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "X-Echo-Server: e2e",
    ]
    head += [f"{name}: {value}" for name, value in extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def serve_http(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    base: dict[str, Any],
) -> None:
    while True:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            return
        headers = [
            [name, value.strip()]
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        ]
        body_len = await asyncio.wait_for(read_body(reader, headers), IO_TIMEOUT)
        record = dict(base, event="request", method=method, target=target, version=version)
        record.update(headers=headers, body_len=body_len)
        record["head_b64"] = base64.b64encode(head).decode("ascii")
        log.write(record)
        response = response_for(record)
        for piece in [response] if isinstance(response, bytes) else response:
            writer.write(piece)
            await writer.drain()
        if any(n.lower() == "connection" and v.lower() == "close" for n, v in headers):
            return


async def handle_echo(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: EventLog,
    listener: str,
    tls: ssl.SSLContext | None,
) -> None:
    peer = peer_text(writer.get_extra_info("peername"))
    log.write({"event": "connect", "listener": listener, "peer": peer, "tls": tls is not None})
    base: dict[str, Any] = {"listener": listener, "peer": peer, "tls": False, "sni": None}
    try:
        if tls is not None:
            await asyncio.wait_for(writer.start_tls(tls), IO_TIMEOUT)
            ssl_object = writer.get_extra_info("ssl_object")
            sni = getattr(ssl_object, "egt_sni", None)
            alpn = ssl_object.selected_alpn_protocol() if ssl_object else None
            log.write(
                {"event": "tls", "listener": listener, "peer": peer, "sni": sni, "alpn": alpn}
            )
            base.update(tls=True, sni=sni)
        await serve_http(reader, writer, log, base)
    except (OSError, ssl.SSLError, ValueError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def handle_trap(writer: asyncio.StreamWriter, log: EventLog, listener: str) -> None:
    peer = peer_text(writer.get_extra_info("peername"))
    log.write({"event": "trap", "listener": listener, "peer": peer})
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--echo", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--echo-tls", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--trap", action="append", default=[], metavar="HOST:PORT")
    args = parser.parse_args(argv)

    log = EventLog(args.log)
    tls = tls_context(args.cert, args.key, ["http/1.1"]) if args.echo_tls else None
    servers: list[asyncio.Server] = []

    for spec, ctx in [(s, None) for s in args.echo] + [(s, tls) for s in args.echo_tls]:

        async def on_echo(r, w, _spec=spec, _ctx=ctx):  # type: ignore[no-untyped-def]
            await handle_echo(r, w, log, _spec, _ctx)

        servers.append(
            await asyncio.start_server(on_echo, sock=bound_socket(*parse_hostport(spec)))
        )
    for spec in args.trap:

        async def on_trap(_r, w, _spec=spec):  # type: ignore[no-untyped-def]
            await handle_trap(w, log, _spec)

        servers.append(
            await asyncio.start_server(on_trap, sock=bound_socket(*parse_hostport(spec)))
        )

    await until_stopped(args.ready)
    for server in servers:
        server.close()
    return 0


if __name__ == "__main__":
    run(main)
