"""What the command lines of both dialects share: JSON in and out, human lines, logging.

Only command-line entry points use this module (``hookrunner.cli`` and
``hookrunner.ax.cli``): results are one JSON object per line on stdout; the
runner's own lines (``hookrunner: ...``) go to stderr; the library's warning and
decision lines arrive through ``logging`` and ``configure_logging`` prints each
message as is, so what a user sees does not depend on how it was routed.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from hookrunner.errors import PayloadError


class _Stderr(logging.Handler):
    """Each record's message on whatever ``sys.stderr`` is when it is written."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def configure_logging() -> None:
    """The command line's choice: the hook runner's lines, unchanged, on stderr (once)."""
    logger = logging.getLogger("hookrunner")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def say(text: str) -> None:
    """One line for the human at the terminal: ``hookrunner: TEXT`` on stderr."""
    sys.stderr.write(f"hookrunner: {text}\n")


def emit(document: dict[str, Any]) -> None:
    """One JSON result on stdout (UTF-8, flushed: a caller may read just this line)."""
    sys.stdout.buffer.write(json.dumps(document, ensure_ascii=False).encode("utf-8") + b"\n")
    sys.stdout.buffer.flush()


def read_stdin_json(*, empty_is_object: bool = False) -> Any:
    """stdin parsed as JSON (``{}`` for blank input when ``empty_is_object``)."""
    data = sys.stdin.buffer.read()
    if empty_is_object and not data.strip():
        return {}
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"stdin is not JSON: {exc}") from None
