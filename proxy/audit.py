"""The audit log: one JSON line per egress decision (SPEC 1.7).

Invariant: a record holds header *names* only. Values of injected headers are
never passed in, so they cannot be written.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO


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


class AuditLog:
    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    @classmethod
    def open(cls, target: str) -> AuditLog:
        if target == "-":
            return cls(sys.stdout)
        return cls(open(target, "a", encoding="utf-8", buffering=1))  # noqa: SIM115 (lives as long as the proxy)

    def write(self, record: AuditRecord) -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line: dict[str, object] = {"time": now}
        line.update(asdict(record))
        line["injected"] = list(record.injected)
        line["duration_s"] = round(record.duration_s, 6)
        self._stream.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._stream.flush()
