"""Settings for the whole suite.

Property tests are derandomized by default, so `make test` (and CI) runs the same
examples every time and a failure is reproducible; `HYPOTHESIS_PROFILE=explore` draws
new examples each run, for looking for trouble (docs/operations.md).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
