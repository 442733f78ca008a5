"""A Server-Sent Events splitter fed chunk by chunk (the WHATWG event-stream format).

`feed(chunk)` returns the events the chunk completed; each `Event` carries its raw bytes
(exactly as received, its blank line included) and, when it was read whole, its `data`
lines joined by `\n` and its `event` name. Lines end with CRLF, LF or CR, also when the
CR and LF of one CRLF arrive in two chunks.

Invariants:
* Nothing is lost or added: the raw bytes of every event returned, in order, followed by
  those `finish()` returns, are the bytes fed.
* Bounded: an event longer than `max_event` bytes is given out in parts as it arrives
  (`whole=False`, no data), so no more than `max_event` bytes (plus one chunk) are held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_EVENT = 1024 * 1024
_TERM = re.compile(rb"[\r\n]")
_CR, _LF = 0x0D, 0x0A


@dataclass(frozen=True, slots=True)
class Event:
    raw: bytes
    data: bytes | None = None  # None: no data line, or not read whole
    name: bytes = b""
    whole: bool = True


class Splitter:
    def __init__(self, max_event: int = MAX_EVENT) -> None:
        self.max_event = max_event
        self._held = bytearray()  # raw bytes of the current event, not yet given out
        self._line = bytearray()
        self._data: list[bytes] = []
        self._name = b""
        self._blank = True  # the current line has no content so far
        self._after_cr = False  # the last terminator was a CR: an LF next completes it
        self._ending = False  # a blank line ended on a CR at a chunk's end
        self._overflow = False

    def feed(self, chunk: bytes) -> list[Event]:
        out: list[Event] = []
        start = pos = 0
        if self._ending and chunk:
            self._ending = self._after_cr = False
            if chunk[0] == _LF:
                start = pos = 1
                self._held += b"\n"
            out.append(self._close())
        for match in _TERM.finditer(chunk, pos):
            at = match.start()
            if self._after_cr and chunk[at] == _LF and at == pos:
                self._after_cr, pos = False, at + 1
                continue
            self._content(chunk[pos:at])
            self._after_cr, pos = chunk[at] == _CR, at + 1
            if not self._blank:
                self._end_line()
                continue
            if self._after_cr and pos == len(chunk):
                self._ending = True
                break
            if self._after_cr and chunk[pos : pos + 1] == b"\n":
                self._after_cr, pos = False, pos + 1
            self._held += chunk[start:pos]
            start = pos
            out.append(self._close())
        else:
            self._content(chunk[pos:])
        self._held += chunk[start:]
        if self._overflow or len(self._held) > self.max_event:
            self._overflow = True
            self._line.clear()
            self._data.clear()
            if self._held and not self._ending:
                out.append(Event(bytes(self._held), whole=False))
                self._held.clear()
        return out

    def finish(self) -> list[Event]:
        """The rest: a last event whose blank line was cut short, or an unfinished one."""
        if self._ending:
            self._ending = False
            return [self._close()]
        if not self._held:
            return []
        rest = Event(bytes(self._held), whole=False)
        self._held.clear()
        return [rest]

    def _content(self, text: bytes) -> None:
        if not text:
            return
        self._blank = False
        if not self._overflow:
            self._line += text

    def _end_line(self) -> None:
        self._blank = True
        line = bytes(self._line)
        self._line.clear()
        if self._overflow:
            return
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._name = value

    def _close(self) -> Event:
        whole = not self._overflow
        data = b"\n".join(self._data) if self._data and whole else None
        event = Event(bytes(self._held), data, self._name, whole)
        self._held.clear()
        self._data.clear()
        self._line.clear()
        self._name, self._blank, self._overflow = b"", True, False
        return event
