"""The audit log: one JSON line per egress decision (docs/configuration.md#audit-log).

`AuditLog` formats and writes a line in the caller's thread. The running proxy wraps it
in a `BackgroundAuditLog`, so the event loop only enqueues a record: formatting, writing
and flushing happen in one writer thread. The queue is bounded; when the writer falls
that far behind (a stalled disk, a stdout nobody reads), a line is dropped and counted
(`egress_audit_lines_dropped_total`) rather than stalling every connection or growing
without limit.

Invariants:
* A record holds header *names* only. Values of injected headers are never passed in,
  so they cannot be written.
* Lines keep the order in which decisions were made; each carries the time of its
  decision, not of its writing.
* `close()` writes every queued line before it returns (bounded by `CLOSE_TIMEOUT_S`).
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO, Protocol

from common.clock import utc_timestamp
from common.jsonlines import json_line

QUEUE_CAPACITY = 65536  # lines; at ~300 bytes each, ~20 MiB at most
CLOSE_TIMEOUT_S = 10.0


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

    def write(self, record: AuditRecord, at: datetime | None = None, flush: bool = True) -> None:
        line: dict[str, object] = {"time": utc_timestamp(at)}
        line.update(asdict(record))
        line["injected"] = list(record.injected)
        line["duration_s"] = round(record.duration_s, 6)
        line["worker"] = self._worker
        if record.sandbox is None:
            del line["sandbox"]
        self._stream.write(json_line(line))
        if flush:
            self._stream.flush()

    def flush(self) -> None:
        self._stream.flush()


_Queued = tuple[AuditRecord, datetime] | None  # None: stop


class BackgroundAuditLog:
    """An `AuditLog` written by a thread of its own; `write` never blocks the caller."""

    def __init__(
        self,
        log: AuditLog,
        on_drop: Callable[[], None] = lambda: None,
        capacity: int = QUEUE_CAPACITY,
    ) -> None:
        self._log = log
        self._on_drop = on_drop
        self._queue: queue.Queue[_Queued] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def write(self, record: AuditRecord) -> None:
        try:
            self._queue.put_nowait((record, datetime.now(UTC)))
        except queue.Full:
            self._on_drop()

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._queue.put(None)  # blocks only while the queue is full, which the writer drains
        self._thread.join(CLOSE_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._log.flush()
                return
            record, at = item
            # One flush per burst: whatever else is already queued is written first.
            self._log.write(record, at, flush=self._queue.empty())
