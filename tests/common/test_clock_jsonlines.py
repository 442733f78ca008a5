"""Timestamps (common/clock.py) and JSON lines (common/jsonlines.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from sandbox_egress.common.clock import utc_timestamp
from sandbox_egress.common.jsonlines import json_line


def test_timestamp_is_utc_milliseconds_with_z() -> None:
    at = datetime(2026, 12, 3, 5, 38, 1, 123456, tzinfo=UTC)
    assert utc_timestamp(at) == "2026-12-03T05:38:01.123Z"
    east = datetime(2026, 12, 3, 7, 38, 1, 123000, tzinfo=timezone(timedelta(hours=2)))
    assert utc_timestamp(east) == "2026-12-03T05:38:01.123Z"
    assert utc_timestamp(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", utc_timestamp())


def test_a_line_is_compact_and_one_line() -> None:
    document = {"a": 1, "text": "two\nlines", "name": "h\u00e9"}
    assert json_line(document) == '{"a":1,"text":"two\\nlines","name":"h\\u00e9"}\n'
    assert (
        json_line(document, ascii_only=False) == '{"a":1,"text":"two\\nlines","name":"h\u00e9"}\n'
    )


def test_spaced_lines_for_the_hook_runner_results() -> None:
    assert json_line({"decision": "allow", "n": [1, 2]}, compact=False) == (
        '{"decision": "allow", "n": [1, 2]}\n'
    )
