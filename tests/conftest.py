"""Settings for the whole suite.

Property tests are derandomized by default, so `make test` (and CI) runs the same
examples every time and a failure is reproducible; `HYPOTHESIS_PROFILE=explore` draws
new examples each run, for looking for trouble (docs/operations.md).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# `make test` runs the unit tests first on two processes (the `make test-unit` selection,
# without coverage), then the rest with this variable set: this run leaves them out.
UNIT_DONE_ENV = "EGRESS_UNIT_TESTS_DONE"
NOT_UNIT_MARKS = ("netns", "slow", "container", "privileged")  # the Makefile's UNIT_MARKS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get(UNIT_DONE_ENV):
        return
    e2e = os.path.join(os.path.dirname(__file__), "e2e") + os.sep
    done = [
        item
        for item in items
        if not str(item.path).startswith(e2e)
        and not any(item.get_closest_marker(mark) for mark in NOT_UNIT_MARKS)
    ]
    if done:
        config.hook.pytest_deselected(items=done)
        kept = set(map(id, done))
        items[:] = [item for item in items if id(item) not in kept]
