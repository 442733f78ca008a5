"""JSON lines: one document per line.

Used for the audit log, the hook runner's results on stdout and `--log-format json`.
A line never contains a raw newline, so readers split on `\\n`. It is compact JSON (no
spaces after separators) unless `compact=False`: the hook runner's results keep the
spacing they always had, an interface callers may compare byte for byte (D74).
`ascii_only=False` keeps non-ASCII text as UTF-8.
"""

from __future__ import annotations

import json
from typing import Any


def json_line(document: Any, *, ascii_only: bool = True, compact: bool = True) -> str:
    """The document as one line of JSON, newline included."""
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(document, separators=separators, ensure_ascii=ascii_only) + "\n"
