"""What the command lines of both dialects share: JSON in and out, human lines, logging.

Only command-line entry points use this module (``hookrunner.cli`` and
``hookrunner.ax.cli``): results are one JSON object per line on stdout; the
runner's own lines (``hookrunner: ...``) go to stderr; the library's warning and
decision lines arrive through ``logging`` and ``configure_logging`` prints each
message as is, so what a user sees does not depend on how it was routed.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from sandbox_egress.common.jsonlines import json_line
from sandbox_egress.common.logs import formatter
from sandbox_egress.hookrunner.enforce import bounds
from sandbox_egress.hookrunner.enforce.bounds import PayloadRefused
from sandbox_egress.hookrunner.errors import PayloadError


class _Stderr(logging.Handler):
    """Each record's message on whatever ``sys.stderr`` is when it is written."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def configure_logging(log_format: str = "text") -> None:
    """The command line's choice (``--log-format``): the hook runner's lines on stderr,
    unchanged (``text``) or one JSON line each (``json``, ``common.logs``)."""
    logger = logging.getLogger("hookrunner")
    handler = next((h for h in logger.handlers if isinstance(h, _Stderr)), None)
    if handler is None:
        handler = _Stderr()
        logger.addHandler(handler)
    handler.setFormatter(formatter(log_format, ""))  # the lines carry their "hookrunner: "
    logger.setLevel(logging.INFO)
    logger.propagate = False


def say(text: str) -> None:
    """One line for the human at the terminal: ``hookrunner: TEXT``, through ``logging``
    so that ``--log-format`` applies to it too."""
    logging.getLogger("hookrunner").info("hookrunner: %s", text)


def emit(document: dict[str, Any]) -> None:
    """One JSON result on stdout (UTF-8, flushed: a caller may read just this line).
    Spaced as it always was: callers compare it byte for byte (D74)."""
    line = json_line(document, ascii_only=False, compact=False)
    sys.stdout.buffer.write(line.encode("utf-8"))
    sys.stdout.buffer.flush()


def read_stdin_json(*, empty_is_object: bool = False) -> Any:
    """stdin parsed as JSON (``{}`` for blank input when ``empty_is_object``);
    ``bounds.PayloadRefused`` for text beyond the bound."""
    data = sys.stdin.buffer.read()
    if empty_is_object and not data.strip():
        return {}
    try:
        return bounds.parse(data)
    except PayloadRefused:
        raise
    except PayloadError as exc:
        raise PayloadError(f"stdin is {exc}") from None
