"""A hostile HTTP/1.1 upstream for the memory-bound tests: endless heads, chunks, trailers.

Run inside a network namespace (`ip netns exec NS python -m testbed.hostile_server ...`).
It reads one request head, then answers according to the path, writing in 1 MiB steps
until it has sent `size` bytes (default 256 MiB) or the proxy stops reading or closes:

* `/huge-head`: a status line, then one header line that never ends;
* `/many-headers`: a status line, then header lines forever (no blank line);
* `/endless-chunks`: a valid chunked response of 1 MiB chunks (a body, not a head);
* `/endless-chunk-line`: a chunked head, then a chunk-size line that never ends;
* `/huge-trailers`: a chunked body of two bytes, then trailer lines forever;
* `/small-trailers`: a complete chunked response with one trailer field;
* `/bad-status?variant=N`: one of `BAD_STATUS_LINES`, then a complete head and body;
* `/mcp-stream?type=N` (or `/mcp`): a complete answer whose body is one server-sent event carrying a
  `tools/list` result (`search_repositories`, `delete_repo`), labelled with the
  Content-Type fields of `MCP_STREAM_TYPES[N]`, encoded by its charset (the MCP gate's
  filter must not trust them);
* `/ws`: a WebSocket handshake, then a sink: frames are parsed and counted, never kept;
  with `?send=N` it first sends N 1 MiB messages (`&endless=1`: N fragments of one
  message that never ends).

When it stops it logs `{"event": "sent", "path", "bytes", "ended_by"}` ("size", "closed",
"stalled") or, for `/ws`, `{"event": "ws", "messages", "bytes", "close_code"}`. The tests
read the log to see that the proxy cut the upstream off. Uses the standard library only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import struct
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testbed.serving import EventLog, arguments, parse_hostport, run, until_stopped

STEP = 1 << 20
DEFAULT_SIZE = 256 << 20
IO_TIMEOUT = 30.0
STALL_TIMEOUT = 5.0  # a proxy that stops reading this long has stopped for good
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
BAD_STATUS_LINES = [
    b"HTTP/1.1 2000 OK\r\n",
    b"HTTP/1.1 abc OK\r\n",
    b"FOO 200 OK\r\n",
    b"HTTP/1.1\r\n",
    b"HTTP/9.9 200 OK\r\n",
    b"\x00\x01\x02\x03\r\n",
]

# (Content-Type fields, the body's encoding) an MCP server may label an event stream with:
# none, twice, another type, a charset a client decodes by (httpx does).
MCP_STREAM_TYPES: list[tuple[list[bytes], str]] = [
    ([b"text/event-stream"], "utf-8"),
    ([b"text/event-stream", b"text/event-stream"], "utf-8"),
    ([b"application/octet-stream"], "utf-8"),
    ([], "utf-8"),
    ([b"text/plain"], "utf-8"),
    ([b"text/event-stream, application/json"], "utf-8"),
    ([b"text/event-stream; charset=utf-16"], "utf-16"),
    ([b'text/event-stream; charset="UTF-7"'], "utf-7"),
    ([b"text/event-stream; charset=cp500"], "cp500"),
]
MCP_TOOLS_EVENT = (
    b'event: message\ndata: {"jsonrpc":"2.0","id":2,"result":{"tools":'
    b'[{"name":"search_repositories","inputSchema":{}},{"name":"delete_repo","inputSchema":{}}]}}\n\n'
)


def endless(prefix: bytes, unit: bytes, size: int) -> tuple[bytes, int]:
    """(a 1 MiB step made of `unit`, how many steps) for `prefix` + `size` bytes."""
    step = unit * (STEP // len(unit))
    return step, max(1, (size - len(prefix)) // len(step))


def plan(path: str, query: dict[str, list[str]], size: int) -> tuple[bytes, bytes, int, bytes]:
    """(first bytes, repeated step, repeat count, last bytes) of the answer to `path`."""
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    if path == "/huge-head":
        prefix = b"HTTP/1.1 200 OK\r\nX-Huge: "
        step, count = endless(prefix, b"a", size)
        return prefix, step, count, b""
    if path == "/many-headers":
        prefix = b"HTTP/1.1 200 OK\r\n"
        step, count = endless(prefix, b"X-Many: %s\r\n" % (b"m" * 52), size)
        return prefix, step, count, b""
    if path == "/endless-chunks":
        step = b"%x\r\n%s\r\n" % (STEP - 16, b"c" * (STEP - 16))
        return chunked, step, max(1, size // len(step)), b"0\r\n\r\n"
    if path == "/endless-chunk-line":
        step, count = endless(chunked, b"f", size)
        return chunked, step, count, b""
    if path == "/huge-trailers":
        prefix = chunked + b"2\r\nok\r\n0\r\n"
        step, count = endless(prefix, b"X-Trailer: %s\r\n" % (b"t" * 49), size)
        return prefix, step, count, b""
    if path == "/small-trailers":
        return chunked + b"2\r\nok\r\n0\r\nX-Trailer: one\r\n\r\n", b"", 0, b""
    if path == "/bad-status":
        line = BAD_STATUS_LINES[int(query.get("variant", ["0"])[0])]
        return line + b"Content-Length: 2\r\n\r\nok", b"", 0, b""
    if path in ("/mcp-stream", "/mcp"):
        fields, encoding = MCP_STREAM_TYPES[int(query.get("type", ["0"])[0])]
        head = b"".join(b"Content-Type: %s\r\n" % field for field in fields)
        body = MCP_TOOLS_EVENT.decode().encode(encoding)
        return (
            b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body),
            b"",
            0,
            b"",
        )
    return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", b"", 0, b""


async def send_plan(writer: asyncio.StreamWriter, answer: tuple[bytes, bytes, int, bytes]) -> str:
    first, step, count, last = answer
    writer.write(first)
    for _ in range(count):
        await asyncio.wait_for(writer.drain(), STALL_TIMEOUT)
        writer.write(step)
    writer.write(last)
    await asyncio.wait_for(writer.drain(), STALL_TIMEOUT)
    return "size"


async def read_exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    return await asyncio.wait_for(reader.readexactly(n), IO_TIMEOUT)


async def websocket_source(writer: asyncio.StreamWriter, count: int, endless: bool) -> None:
    """Send `count` 1 MiB binary messages, or one message whose fragments never end."""
    header = struct.pack("!BBQ", 0x02 if endless else 0x82, 127, STEP)
    frame = header + bytes(STEP)
    for sent in range(count):
        writer.write(frame if not endless or sent == 0 else b"\x00" + frame[1:])
        await asyncio.wait_for(writer.drain(), STALL_TIMEOUT)


async def websocket_sink(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str, source: tuple[int, bool]
) -> dict[str, Any]:
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\n\r\n" % accept.encode()
    )
    await writer.drain()
    await websocket_source(writer, *source)
    messages = total = 0
    while True:
        b0, b1 = await read_exactly(reader, 2)
        length = b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await read_exactly(reader, 2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await read_exactly(reader, 8))
        mask = await read_exactly(reader, 4) if b1 & 0x80 else b""
        left, payload = length, b""
        while left:
            data = await asyncio.wait_for(reader.read(min(left, STEP)), IO_TIMEOUT)
            if not data:
                raise ConnectionError("closed inside a frame")
            left -= len(data)
            if b0 & 0x0F == 0x8:
                payload += data  # a close frame's payload is small
        opcode = b0 & 0x0F
        if opcode == 0x8:
            code = int.from_bytes(bytes(b ^ mask[i % 4] for i, b in enumerate(payload[:2])))
            writer.write(b"\x88\x02" + (1000).to_bytes(2, "big"))
            await writer.drain()
            return {"messages": messages, "bytes": total, "close_code": code}
        if opcode in (0x0, 0x1, 0x2):
            total += length
            messages += 1 if b0 & 0x80 else 0


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: EventLog) -> None:
    record: dict[str, Any] = {"event": "sent", "path": None, "bytes": 0, "ended_by": "closed"}
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IO_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        parts = urlsplit(lines[0].split(" ")[1])
        query = parse_qs(parts.query)
        record["path"] = parts.path
        if parts.path == "/ws":
            headers = {
                n.strip().lower(): v.strip() for n, _, v in (x.partition(":") for x in lines)
            }
            record = {"event": "ws", "messages": 0, "bytes": 0, "close_code": None}
            count = int(query.get("send", ["0"])[0])
            source = (count, query.get("endless", ["0"])[0] == "1")
            with contextlib.suppress(OSError, ConnectionError, asyncio.IncompleteReadError):
                record.update(
                    await websocket_sink(reader, writer, headers["sec-websocket-key"], source)
                )
            return
        answer = plan(parts.path, query, int(query.get("size", [str(DEFAULT_SIZE)])[0]))
        try:
            record["ended_by"] = await send_plan(writer, answer)
        except TimeoutError:
            record["ended_by"] = "stalled"
        finally:
            record["bytes"] = _written(writer)
    except (OSError, ValueError, IndexError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        log.write(record)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _written(writer: asyncio.StreamWriter) -> int:
    """Bytes handed to the kernel: what was written minus what is still buffered."""
    counted: int = getattr(writer, "egt_written", 0)
    return counted - writer.transport.get_write_buffer_size()


async def main(argv: list[str]) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    log = EventLog(args.log)
    host, port = parse_hostport(args.listen)

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        original = w.write

        def counting_write(data: bytes | bytearray | memoryview) -> None:
            w.egt_written = getattr(w, "egt_written", 0) + len(data)  # type: ignore[attr-defined]
            original(data)

        w.write = counting_write  # type: ignore[method-assign]
        await handle(r, w, log)

    server = await asyncio.start_server(on_connect, host, port, reuse_address=True)
    await until_stopped(args.ready)
    server.close()
    return 0


if __name__ == "__main__":
    run(main)
