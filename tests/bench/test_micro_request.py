"""bench/micro_request.py: every operation runs on the bench's allowlist, the hosts it
times are allowed (it refuses to time a refusal), and each answers a time per run."""

from __future__ import annotations

import pytest

from bench import micro_request


def test_every_operation_runs_and_answers_ns_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(micro_request, "LOOPS", 3)
    ops = micro_request._operations()
    assert set(ops) == {
        "decide_request, transform entry",
        "decide_request, rules+mcp",
        "override_methods",
        "head_problem",
        "streams_filter",
        "entry_policies (streams_filter's input)",
    }
    for op in ops.values():
        assert op() > 0
