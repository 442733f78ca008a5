"""The chunk framing the body relay reads and writes for a chunked HTTP/1.1 body (issue
49, D605): pure functions, no mitmproxy.

`take` continues h11's `ChunkedReader` over one read's plaintext from the reader's own
state (`_bytes_in_chunk`, `_bytes_to_discard`) and returns the chunk data it found,
piece by piece as h11 would hand them on (one piece per chunk, or the part of a chunk the
read holds), where it stopped, and the reader's state there. It is stricter than h11: a
chunk-size line is 1-16 hex digits and CRLF, nothing else (no extensions, no spaces, no
line longer than `LINE_LIMIT`), and a chunk's data ends in exactly CRLF. It stops before
anything else — the last chunk (size 0, which the layers must see: the end of the message
and its trailers), a line it cannot read whole in this read, a line it would not accept,
a wrong chunk ending — and leaves that to mitmproxy's layers, whose h11 then reads it
from the very state `take` returned: what h11 accepts or refuses is decided by h11, so the
relay can never accept a framing the layers would refuse.

`frame` is what mitmproxy's HTTP/1 layer writes for one piece of a chunked message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LINE_LIMIT = 18  # 16 hex digits and CRLF: a longer size line is the layers' to judge
_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}\r\n")
_END = b"\r\n"


@dataclass(frozen=True, slots=True)
class Taken:
    pieces: list[bytes]  # chunk data, in h11's pieces
    stop: int  # where the layers take over in the read
    in_chunk: int  # the reader's `_bytes_in_chunk` at `stop`
    to_discard: bytes  # the reader's `_bytes_to_discard` at `stop`


def take(data: bytes, in_chunk: int, to_discard: bytes) -> Taken:
    """The chunk data of `data` read from the state (`in_chunk`, `to_discard`) of an h11
    `ChunkedReader` that is not reading trailers."""
    pieces: list[bytes] = []
    pos, size = 0, len(data)
    while pos < size:
        if to_discard:  # the CRLF after a chunk's data, perhaps cut by the last read
            got = data[pos : pos + len(to_discard)]
            if got != to_discard[: len(got)]:
                break  # h11 refuses it: the layers say so
            pos += len(got)
            to_discard = to_discard[len(got) :]
            continue
        if in_chunk == 0:  # a chunk-size line, whole in this read, or the layers'
            line = _SIZE.match(data, pos, min(pos + LINE_LIMIT, size))
            if line is None:
                break
            length = int(line.group()[:-2], 16)
            if length == 0:
                break  # the last chunk and the trailers: the end of the message
            pos, in_chunk = line.end(), length
            continue
        piece = data[pos : pos + in_chunk]
        pieces.append(piece)
        pos += len(piece)
        in_chunk -= len(piece)
        if in_chunk == 0:
            to_discard = _END
    return Taken(pieces, pos, in_chunk, to_discard)


def frame(piece: bytes) -> bytes:
    """One piece of a chunked message as mitmproxy's HTTP/1 layer sends it."""
    return b"%x\r\n%s\r\n" % (len(piece), piece)
