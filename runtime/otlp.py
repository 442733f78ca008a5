"""The OTLP/HTTP log exporter of `--otlp-endpoint` (issue 34): every audit record is also
sent to an OpenTelemetry collector, batched, on a task of its own.

`write` (the audit sink, called on the event loop) only appends to a bounded deque and
never waits; the `run` task posts what is queued every `INTERVAL_S` (or at once when a
batch is full) as one JSON `ExportLogsServiceRequest` (`proxy.otlp`) to the endpoint
(`/v1/logs` when the URL has no path), over HTTP/1.1, bounded by `TIMEOUT_S`. A dead,
slow or refusing collector costs no request anything: a batch that could not be
delivered, and a record that found the queue full, is dropped and counted in
`egress_audit_dropped_total{sink="otlp"}`. No retry: the audit file keeps every record.

`--otlp-header NAME=VALUE` (repeatable) adds a header to every export, e.g. a collector's
`Authorization`; the value may hold `${NAME}` and `${file:/path}` references
(`proxy.references`), resolved at start (a problem stops the start, naming the header and
the reference, never a value) and again for every batch, so a rotated token file is read
(a batch whose header cannot be resolved is dropped and counted). The values are never
logged (D402).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from sandbox_egress.proxy.audit import AuditRecord, AuditSink
from sandbox_egress.proxy.otlp import export_request, log_record
from sandbox_egress.proxy.references import resolve

BATCH = 512
CAPACITY = 8192
INTERVAL_S = 1.0
TIMEOUT_S = 5.0
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP field name (RFC 9110 5.1)
_OWN = {"host", "content-type", "content-length", "connection", "transfer-encoding"}


def header_option(text: str) -> tuple[str, str]:
    """`--otlp-header NAME=VALUE`: the name and the unresolved value (ValueError: why)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not _TOKEN.match(name) or not value:
        raise ValueError("expected NAME=VALUE, e.g. Authorization=Bearer ${file:/run/otlp-token}")
    if name.lower() in _OWN:
        raise ValueError(f"{name} is set by the exporter itself")
    return name, value


def resolve_headers(
    headers: Sequence[tuple[str, str]], environ: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """The headers with their references resolved; ValueError naming the header and the
    reference (never a value) when one cannot be, or when a value would break the head."""
    environ = dict(os.environ) if environ is None else environ
    problems: list[str] = []
    resolved = []
    for name, value in headers:
        found = resolve(value, name, environ, lambda where, why: problems.append(f"{where}: {why}"))
        if found is None:
            continue
        if not found[0] or any(c in found[0] for c in "\r\n\0"):
            problems.append(f"{name}: the value is empty or holds CR, LF or NUL")
            continue
        resolved.append((name, found[0]))
    if problems:
        raise ValueError("--otlp-header " + "; ".join(problems))
    return resolved


class OtlpExporter:
    def __init__(
        self,
        endpoint: str,
        dropped: Callable[[int], None],
        worker: int | None = None,
        interval_s: float = INTERVAL_S,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected http://HOST:PORT[/v1/logs] or https://...")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._path = parts.path if parts.path not in ("", "/") else "/v1/logs"
        self._dropped = dropped
        self._worker = worker
        self._interval = interval_s
        self._headers = tuple(headers)  # unresolved: resolved per batch
        self._queue: deque[tuple[AuditRecord, datetime]] = deque()
        self._full = asyncio.Event()
        self.sent = 0

    def write(self, record: AuditRecord) -> None:
        if len(self._queue) >= CAPACITY:
            self._dropped(1)
            return
        self._queue.append((record, datetime.now(UTC)))
        if len(self._queue) >= BATCH:
            self._full.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), self._interval)
            self._full.clear()
            await self.flush()

    async def flush(self) -> None:
        while self._queue:
            count = min(len(self._queue), BATCH)
            batch = [self._queue.popleft() for _ in range(count)]
            body = json.dumps(
                export_request([log_record(r, at, self._worker) for r, at in batch])
            ).encode()
            try:
                delivered = await asyncio.wait_for(self._post(body), TIMEOUT_S)
            except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
                delivered = False
            if delivered:
                self.sent += count
            else:
                self._dropped(count)

    async def _post(self, body: bytes) -> bool:
        extra = "".join(f"{name}: {value}\r\n" for name, value in resolve_headers(self._headers))
        context = ssl.create_default_context() if self._tls else None
        reader, writer = await asyncio.open_connection(self._host, self._port, ssl=context)
        try:
            head = (
                f"POST {self._path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                f"{extra}Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
            status = (await reader.readline()).split(b" ", 2)
            return len(status) >= 2 and status[1][:1] == b"2"
        finally:
            writer.close()


class TeeAudit:
    """An audit sink writing each record to every sink it holds."""

    def __init__(self, *sinks: AuditSink) -> None:
        self._sinks = sinks

    def write(self, record: AuditRecord) -> None:
        for sink in self._sinks:
            sink.write(record)
