"""A chat-completions server for the replayed session (bench/session.py): TLS 1.3,
HTTP/1.1 with keep-alive; every POST to /v1/chat/completions is answered with a
streamed completion (server-sent events, chunked): `CHUNKS` deltas, then `[DONE]`."""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl

CHUNKS = 20
WORD = "token "


def _event(number: int, content: str | None) -> bytes:
    delta = {"content": content} if content is not None else {}
    chunk = {
        "id": f"chatcmpl-bench-{number}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None if content else "stop"}],
    }
    data = f"data: {json.dumps(chunk)}\n\n".encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _answer() -> list[bytes]:
    events = [_event(n, WORD) for n in range(CHUNKS)] + [_event(CHUNKS, None)]
    done = b"data: [DONE]\n\n"
    return events + [f"{len(done):x}\r\n".encode() + done + b"\r\n", b"0\r\n\r\n"]


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            if not head.startswith(b"POST /v1/chat/completions "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                continue
            writer.write(HEAD)
            for piece in _answer():
                writer.write(piece)
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["http/1.1"])
    server = await asyncio.start_server(serve, host, int(port), ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
