"""Timestamps written in logs, audit lines and payloads: one format.

UTC, ISO 8601, millisecond precision, `Z` suffix: `2026-12-03T05:38:01.123Z`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc_timestamp(at: datetime | None = None) -> str:
    """`at` (default: now) in the one format; a naive `at` is taken as UTC."""
    moment = at or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
