"""The audit log: one JSON line per egress decision (docs/configuration.md#audit-log).

`AuditLog` formats and writes a line in the caller's thread. The running proxy wraps it
in a `BackgroundAuditLog`, so the event loop only appends a record to a deque: formatting,
writing and flushing happen in one writer thread (D171). The loop wakes the writer only
when it is not already awake: one wake per batch, none while the writer is busy, and
what queued up meanwhile is written as whole lines in one `write()` and one flush. The
deque is bounded; when the writer falls that
far behind (a stalled disk, a stdout nobody reads), a line is dropped and counted
(`egress_audit_lines_dropped_total`) rather than stalling every connection or growing
without limit.

Invariants:
* A record holds header *names* only. Values of injected headers are never passed in,
  so they cannot be written. A request's path is written with its query values masked.
* No record holds a resolved value in any spelling the proxy knows (`proxy.values.spellings`):
  the host, SNI and path a sandbox chose are written with each spelling of a value
  replaced by `[secret]`, or, when only a decoding shows one, as `[secret]` whole
  (`masked`, applied by the addon to every record before it is written, D363).
* Lines keep the order in which decisions were made; each carries the time of its
  decision, not of its writing.
* `close()` wakes the writer, which writes every queued line before it returns (bounded
  by `CLOSE_TIMEOUT_S`).
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import IO, Any, Protocol
from urllib.parse import unquote_to_bytes

from sandbox_egress.common.clock import utc_timestamp
from sandbox_egress.common.jsonlines import json_line

QUEUE_CAPACITY = 65536  # lines; at ~300 bytes each, ~20 MiB at most
CLOSE_TIMEOUT_S = 10.0
BATCH = 256  # lines per write
# After each write the writer lets lines gather this long before it wakes again: waking a
# thread per request cost the event loop a notify and a GIL hand-over each time (issue 36).
GATHER_S = 0.02

# An MCP POST's (methods, tools, argument names): names only, never values (issue 33).
McpNames = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    client: str
    method: str
    scheme: str
    host: str
    port: int | None
    decision: str
    reason: str
    rule: str | None
    injected: tuple[str, ...]
    status: int | None
    bytes_sent: int
    bytes_received: int
    duration_s: float
    connection: str = ""  # the client connection's id: ties a CONNECT to the requests in it
    sni: str | None = None  # the TLS server name the client sent
    upstream: str | None = None  # the address connected to (or pinned, before connecting)
    clause: str | None = None  # the entry's rule that decided: "rules[1]", "deny[0]"
    sandbox: str | None = None  # a node proxy's sandbox id (1.12); the line omits it when None
    credentials: tuple[str, ...] = ()  # issue 32: the credentials written (names); omitted if none
    # An HTTP request's path as the client sent it, query values masked (`audit_path`);
    # the line omits it for a CONNECT, a ClientHello or a TCP stream.
    path: str | None = None

    mcp: McpNames | None = None  # an MCP POST's names (1.14); the line omits it when None
    approval: str | None = None  # issue 47: the approval that held or granted it; else omitted

    # Fields a clause added (name, scalar), written as top-level keys: a model API call's
    # `llm_model`, tokens and cost (issue 46). Never a secret: the clause says what it adds.
    extra: tuple[tuple[str, object], ...] = ()


_FIELDS = tuple(f.name for f in fields(AuditRecord))

SECRET_MASK = "[secret]"


class Searcher(Protocol):
    """A compiled alternation of every spelling of the resolved values (`re` or RE2)."""

    def search(self, data: bytes) -> Any: ...

    def sub(self, repl: bytes, data: bytes) -> bytes: ...


def masked(text: str, searchers: Sequence[Searcher | None]) -> str:
    """`text` (a host, an SNI, a request-target) with every spelling of a resolved value
    replaced by `[secret]`; `[secret]` whole when one still shows once percent-decoded."""
    found = [s for s in searchers if s is not None]
    if not found:
        return text
    data = text.encode("utf-8", "surrogateescape")
    for searcher in found:
        if searcher.search(data) is not None:
            data = searcher.sub(SECRET_MASK.encode(), data)
    if b"%" in data and any(s.search(unquote_to_bytes(data)) is not None for s in found):
        return SECRET_MASK
    return data.decode("utf-8", "surrogateescape")


def masked_record(record: AuditRecord, searchers: Sequence[Searcher | None]) -> AuditRecord:
    """`record` with `masked` applied to what the sandbox chose: host, SNI, path and the
    text fields a clause added."""
    if not any(s is not None for s in searchers):
        return record
    host, sni = masked(record.host, searchers), masked(record.sni or "", searchers)
    path = None if record.path is None else masked(record.path, searchers)
    extra = tuple(
        (name, masked(value, searchers) if isinstance(value, str) else value)
        for name, value in record.extra
    )  # a clause's fields may hold what the sandbox chose (a model name)
    if (host, sni or None, path, extra) == (record.host, record.sni, record.path, record.extra):
        return record
    return replace(record, host=host, sni=sni or None, path=path, extra=extra)


AUDIT_PATH_CHARS = 512
MASK = "…"


def audit_path(target: str, searchers: Sequence[Searcher | None] = ()) -> str:
    """A request-target for the audit line: the path as sent, every spelling of a resolved
    value `[secret]` (`masked`, before anything is cut), every query value masked (a query
    is where credentials and placeholders travel; a part without `=` is a value), at most
    `AUDIT_PATH_CHARS` characters, a cut one ending in `…`."""
    path, question, query = masked(target, searchers).partition("?")
    if question:
        parts = (p.partition("=") for p in query.split("&") if p)
        path += "?" + "&".join(f"{name}={MASK}" if eq else MASK for name, eq, _ in parts)
    return path if len(path) <= AUDIT_PATH_CHARS else path[: AUDIT_PATH_CHARS - 1] + MASK


class AuditSink(Protocol):
    def write(self, record: AuditRecord) -> None: ...


class AuditLog:
    def __init__(self, stream: IO[str], worker: int | None = None) -> None:
        self._stream = stream
        self._worker = worker  # `--workers N`: which process decided (None: the only one)

    @classmethod
    def open(cls, target: str, worker: int | None = None) -> AuditLog:
        if target == "-":
            return cls(sys.stdout, worker)
        return cls(open(target, "a", encoding="utf-8", buffering=1), worker)  # noqa: SIM115 (lives as long as the proxy)

    def line(self, record: AuditRecord, at: datetime | None = None) -> str:
        """`record` as one JSON line (with its newline)."""
        line: dict[str, object] = {"time": utc_timestamp(at)}
        # The fields are scalars (and one tuple, listed below): no `asdict` deep copy.
        line.update((name, getattr(record, name)) for name in _FIELDS)
        line["injected"] = list(record.injected)
        line["duration_s"] = round(record.duration_s, 6)
        line["worker"] = self._worker
        if record.sandbox is None:
            del line["sandbox"]
        if record.credentials:
            line["credentials"] = list(record.credentials)
        else:
            del line["credentials"]
        if record.path is None:
            del line["path"]
        if record.approval is None:
            del line["approval"]

        if record.mcp is None:
            del line["mcp"]
        else:
            methods, tools, arguments = record.mcp
            line["mcp"] = {"methods": methods, "tools": tools, "arguments": arguments}
        del line["extra"]
        line.update(record.extra)
        return json_line(line)

    def write(self, record: AuditRecord, at: datetime | None = None, flush: bool = True) -> None:
        self.write_lines([self.line(record, at)], flush)

    def write_lines(self, lines: list[str], flush: bool = True) -> None:
        """Whole lines in one write: a reader never sees half of one."""
        self._stream.write("".join(lines))
        if flush:
            self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()


class BackgroundAuditLog:
    """An `AuditLog` written by a thread of its own; `write` never blocks."""

    def __init__(
        self,
        log: AuditLog,
        on_drop: Callable[[], None] = lambda: None,
        capacity: int = QUEUE_CAPACITY,
        gather_s: float = GATHER_S,
    ) -> None:
        self._log = log
        self._on_drop = on_drop
        self._capacity = capacity
        self._gather_s = gather_s
        self._closing = threading.Event()  # ends a gathering pause at once
        # Appending and popping a deque are atomic: the loop and the writer share no lock.
        self._pending: deque[tuple[AuditRecord, datetime]] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def write(self, record: AuditRecord) -> None:
        if len(self._pending) >= self._capacity:
            self._on_drop()
            return
        self._pending.append((record, datetime.now(UTC)))
        # Appended first, checked second: a writer that cleared the flag drains this line.
        if not self._wake.is_set():
            self._wake.set()

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._stopping = True
        self._closing.set()
        self._wake.set()
        self._thread.join(CLOSE_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._drain()
            if self._stopping:
                self._drain()
                self._log.flush()
                return
            self._closing.wait(self._gather_s)  # a burst's lines: one wake, one write

    def _drain(self) -> None:
        pending, log = self._pending, self._log
        while pending:
            # One write and one flush per batch of what is queued now (at most BATCH lines).
            batch = [log.line(*pending.popleft()) for _ in range(min(len(pending), BATCH))]
            log.write_lines(batch)
