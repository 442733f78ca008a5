"""Operator messages through `logging`, in the format the command line chose.

Library code logs to a named logger (`egress`, `hookrunner`) and never picks a format or
a stream; the CLI calls `log_handler` once with `--log-format`:

* `text` (the default): one human line per record, `PREFIX: message`, as the programs
  have always written;
* `json`: one JSON line per record, `{"time", "level", "logger", "message"}` (and
  `"exception"` with the traceback text when there is one), times as `common.clock`.

A message is written as given: whoever logs is responsible for keeping secrets out of it.
The proxy also puts a `MaskedValues` filter on its handlers (mitmproxy's and `egress`'s),
so that a message quoting what a sandbox sent (a host, an SNI, a target) has every
spelling of a value the proxy holds written `[secret]` (D363).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO

from sandbox_egress.common.clock import utc_timestamp
from sandbox_egress.common.jsonlines import json_line

LOG_FORMATS = ("text", "json")


class MaskedValues(logging.Filter):
    """A handler's filter that rewrites each record's message through `mask` (the proxy's
    masking of every spelling of a value it holds); a record is never dropped. The
    traceback of a record is formatted by the handler, from its exception: not masked."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        super().__init__()
        self._mask = mask

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self._mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class JsonLogFormatter(logging.Formatter):
    """One JSON line (without its newline) per record."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": utc_timestamp(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json_line(document, ascii_only=False).rstrip("\n")


def formatter(log_format: str, prefix: str) -> logging.Formatter:
    """The formatter for `--log-format`: `PREFIX: message` lines, or JSON lines."""
    if log_format == "json":
        return JsonLogFormatter()
    if log_format == "text":
        return logging.Formatter(f"{prefix}: %(message)s" if prefix else "%(message)s")
    raise ValueError(f"unknown log format {log_format!r}; one of {', '.join(LOG_FORMATS)}")


class _Handler(logging.StreamHandler[IO[str]]):
    """The handler `log_handler` installs, so that a later call can replace it."""


def announce(log_format: str, stream: IO[str], prefix: str, logger: str, message: str) -> None:
    """One informational line written now, whatever the logger's level (start-up banners)."""
    record = logging.LogRecord(logger, logging.INFO, __file__, 0, message, None, None)
    stream.write(formatter(log_format, prefix).format(record) + "\n")
    stream.flush()


def log_handler(
    logger: str, log_format: str, stream: IO[str], prefix: str, level: int = logging.INFO
) -> logging.Handler:
    """Send `logger`'s records (level and up) to `stream` in `log_format`; returns the handler.

    A handler installed by an earlier call is replaced. The logger stops propagating,
    so a root handler (an embedding runtime's, or pytest's) does not print a line twice.
    """
    handler = _Handler(stream)
    handler.setFormatter(formatter(log_format, prefix))
    target = logging.getLogger(logger)
    for previous in [h for h in target.handlers if isinstance(h, _Handler)]:
        target.removeHandler(previous)  # a second call (tests run main() often) replaces
    target.addHandler(handler)
    target.setLevel(level)
    target.propagate = False
    return handler


def add_log_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="operator messages on stderr: text lines (default) or JSON lines",
    )
