"""Server-sent events as a stream transform: each event is forwarded the moment its blank
line arrives, its `data` rewritten when the rewrite says so (`proxy.mcp.tools_list`).

`EventStream.feed` takes the answer's chunks as they come and returns the bytes to
forward now: every complete event (unchanged bytes, or rebuilt with the new data), never
a partial one, and nothing held back once complete. The line grammar is the WHATWG
one: a line ends at CRLF, LF or CR; an empty line ends an event; `data:` lines join with
LF, one space after the colon dropped.

Invariants: memory is bounded by one event (`limit`); an event over it, or whose data is
not UTF-8, raises `Unreadable` (never forwarded unfiltered, D215). At the end of the
stream (b"") an unfinished event is judged as if it had ended there.
"""

from __future__ import annotations

from collections.abc import Callable

from sandbox_egress.proxy.mcp.tools_list import Unreadable

Rewrite = Callable[[str], str | None]  # the event's data → the new data, or None: unchanged


class EventStream:
    def __init__(self, rewrite: Rewrite, limit: int) -> None:
        self.rewrite = rewrite
        self.limit = limit
        self.pending = bytearray()  # bytes not yet split into lines
        self.lines: list[bytes] = []  # the current event's lines, terminators included
        self.size = 0
        self.started = False  # a leading byte-order mark is dropped

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to forward now; `chunk` b"" marks the end of the stream."""
        if not chunk:
            out = bytearray()
            line = bytes(self.pending)
            self.pending.clear()
            if line == b"\r":  # a CR last ends its line: a blank line, the event's end
                out += self._event(self.lines + [line])
                self.lines = []
            elif line:
                self.lines.append(line if line.endswith(b"\r") else line + b"\n")
            if any(line.strip(b"\r\n") for line in self.lines):
                out += self._event(self.lines + [b"\n"])
            self.lines, self.size = [], 0
            return bytes(out)
        if not self.started:
            self.pending += chunk
            if len(self.pending) < 3 and b"\xef\xbb\xbf".startswith(bytes(self.pending)):
                return b""
            self.started = True
            if self.pending.startswith(b"\xef\xbb\xbf"):
                del self.pending[:3]
        else:
            self.pending += chunk
        return self._split()

    def _split(self) -> bytes:
        out = bytearray()
        start = 0
        data = self.pending
        while True:
            end = _line_end(data, start)
            if end is None:
                break
            line = bytes(data[start:end])
            start = end
            self.size += len(line)
            if line in (b"\n", b"\r\n", b"\r"):
                out += self._event(self.lines + [line])
                self.lines, self.size = [], 0
            else:
                self.lines.append(line)
        del data[:start]
        if self.size + len(data) > self.limit:
            raise Unreadable("an event is larger than mcp.max_body")
        return bytes(out)

    def _event(self, lines: list[bytes]) -> bytes:
        raw = b"".join(lines)
        data: list[bytes] = []
        for line in lines:
            name, colon, value = line.rstrip(b"\r\n").partition(b":")
            if name == b"data":
                data.append(value[1:] if colon and value.startswith(b" ") else value)
        if not data:
            return raw
        try:
            text = b"\n".join(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unreadable("an event's data is not UTF-8") from exc
        rewritten = self.rewrite(text)
        if rewritten is None:
            return raw
        kept = [line for line in lines[:-1] if not _is_data(line)]
        new = [b"data: " + part.encode() + b"\n" for part in rewritten.split("\n")]
        return b"".join(kept) + b"".join(new) + b"\n"


def _is_data(line: bytes) -> bool:
    return line.rstrip(b"\r\n").partition(b":")[0] == b"data"


def _line_end(data: bytearray, start: int) -> int | None:
    """The index after the line beginning at `start`, or None while it is incomplete (a
    CR at the end may still be followed by its LF)."""
    lf = data.find(b"\n", start)
    cr = data.find(b"\r", start)
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else lf + 1
    if cr + 1 == len(data):
        return None  # CR last: wait for the next byte
    return cr + 2 if data[cr + 1 : cr + 2] == b"\n" else cr + 1
