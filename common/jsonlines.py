"""JSON lines: one document per line, each written whole and flushed.

Used for the audit log, the hook runner's results on stdout and `--log-format json`.
A line is compact JSON (no spaces after separators) and never contains a raw newline,
so readers split on `\\n`. `ascii_only=False` keeps non-ASCII text as UTF-8.
"""

from __future__ import annotations

import json
import threading
from typing import IO, Any


def json_line(document: Any, *, ascii_only: bool = True) -> str:
    """The document as one line of JSON, newline included."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=ascii_only) + "\n"


class JsonLineWriter:
    """Writes documents to a text stream, one line each; safe to share between threads."""

    def __init__(self, stream: IO[str], *, ascii_only: bool = True) -> None:
        self.stream = stream
        self._ascii_only = ascii_only
        self._lock = threading.Lock()

    def write(self, document: Any, *, flush: bool = True) -> None:
        line = json_line(document, ascii_only=self._ascii_only)
        with self._lock:
            self.stream.write(line)
            if flush:
                self.stream.flush()

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()
