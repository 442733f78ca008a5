"""The audit log (proxy/audit/log.py): one JSON line per decision, written off the event loop."""

from __future__ import annotations

import io
import json
import threading
from datetime import UTC, datetime

import pytest

from sandbox_egress.proxy.audit.log import (
    AUDIT_PATH_CHARS,
    AuditLog,
    AuditRecord,
    BackgroundAuditLog,
    audit_path,
)


def record(n: int) -> AuditRecord:
    return AuditRecord(
        client="198.19.0.1:40000", method="GET", scheme="https", host=f"h{n}.example",
        port=443, decision="allow", reason="allowlisted", rule="*.example",
        injected=("Authorization",), status=200, bytes_sent=0, bytes_received=n,
        duration_s=0.0012345678,
    )  # fmt: skip


class Gate(io.StringIO):
    """A stream whose writes wait until the test opens the gate (a stalled disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()  # the writer is inside its first write
        self.open = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        self.open.wait(10)
        return super().write(text)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_has_every_field_and_the_decisions_time() -> None:
    stream = io.StringIO()
    AuditLog(stream).write(record(7), datetime(2026, 12, 2, 18, 0, 0, 123456, tzinfo=UTC))
    assert lines(stream) == [
        {"time": "2026-12-02T18:00:00.123Z", "client": "198.19.0.1:40000", "method": "GET",
         "scheme": "https", "host": "h7.example", "port": 443, "decision": "allow",
         "reason": "allowlisted", "rule": "*.example", "injected": ["Authorization"],
         "status": 200, "bytes_sent": 0, "bytes_received": 7, "duration_s": 0.001235,
         "connection": "", "sni": None, "upstream": None, "clause": None, "worker": None}
    ]  # fmt: skip


def test_background_writer_keeps_order_and_close_writes_everything() -> None:
    stream = io.StringIO()
    log = BackgroundAuditLog(AuditLog(stream))
    for n in range(500):
        log.write(record(n))
    log.close()
    assert [line["bytes_received"] for line in lines(stream)] == list(range(500))


def test_a_full_queue_drops_and_counts_instead_of_blocking() -> None:
    stream, dropped = Gate(), []
    log = BackgroundAuditLog(AuditLog(stream), on_drop=lambda: dropped.append(1), capacity=4)
    log.write(record(0))
    assert stream.entered.wait(10)  # the writer holds line 0 at the gate
    for n in range(1, 20):  # four wait in the queue, fifteen are dropped
        log.write(record(n))
    assert len(dropped) == 15
    stream.open.set()
    log.close()
    assert [line["bytes_received"] for line in lines(stream)] == [0, 1, 2, 3, 4]


def test_lines_queued_while_the_writer_writes_go_out_in_one_write() -> None:
    """One wake per batch (D171): what queues behind a slow write is one more write."""
    stream = CountingGate()
    log = BackgroundAuditLog(AuditLog(stream))
    log.write(record(0))
    assert stream.entered.wait(10)  # the writer holds line 0 at the gate
    for n in range(1, 300):
        log.write(record(n))
    stream.open.set()
    log.close()
    assert [line["bytes_received"] for line in lines(stream)] == list(range(300))
    assert stream.writes == 3  # line 0, then 256 lines, then 43: whole lines per write


class Counted(io.StringIO):
    """A stream that counts its writes and says when the first one happened."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.first = threading.Event()

    def write(self, text: str) -> int:
        self.writes += 1
        self.first.set()
        return super().write(text)


def test_a_burst_after_a_write_gathers_into_one_write() -> None:
    """After a write the writer waits `gather_s` before it wakes again (issue 36): the loop
    no longer wakes a thread per request; closing ends the wait at once."""
    stream, gathering = Counted(), threading.Event()

    class Closing(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            gathering.set()
            return super().wait(timeout)

    log = BackgroundAuditLog(AuditLog(stream), gather_s=60)
    log._closing = Closing()  # says when the writer starts gathering
    log.write(record(0))
    assert stream.first.wait(10)  # written at once: the first line waits for nothing
    assert gathering.wait(10)
    for n in range(1, 100):
        log.write(record(n))
    assert stream.writes == 1  # the writer gathers: nothing of the burst written yet
    log.close()  # ends the gathering at once (60 s would fail the join)
    assert stream.writes == 2
    assert [line["bytes_received"] for line in lines(stream)] == list(range(100))


class CountingGate(Gate):
    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


AUDIT_PATHS = [
    # (request-target, what the audit line says)
    ("/repos/acme/web/issues", "/repos/acme/web/issues"),
    ("/search?q=secret&page=2", "/search?q=…&page=…"),
    ("/v1?key=sk-egress-placeholder", "/v1?key=…"),
    ("/x?sk-bare-value", "/x?…"),  # a part without `=` is a value
    ("/x?a=1&&b", "/x?a=…&…"),
    ("/x?", "/x?"),
    ("/" + "a" * 600, "/" + "a" * 510 + "…"),
    ("*", "*"),
]


@pytest.mark.parametrize(("target", "expected"), AUDIT_PATHS)
def test_audit_path_masks_query_values_and_is_bounded(target: str, expected: str) -> None:
    assert audit_path(target) == expected
    assert len(audit_path(target)) <= AUDIT_PATH_CHARS
