"""What an approver may grant (docs/configuration.md#approvals): `once`, `session`, or a
duration such as `30m`, `1h`, `7d`.

Invariant: a `Scope` is parsed once, here; its `ttl_s` is how long the grant is kept in
the state backend (`once`: the approval's own `timeout`, lapsing unused; `session`:
`SESSION_S`, since a shared store has no notion of one proxy's restart, D482).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SESSION_S = 24 * 3600.0  # a session grant lapses after a day at the latest (D482)
MAX_DURATION_S = 30 * 24 * 3600.0
_DURATION = re.compile(r"^([1-9][0-9]{0,5})(s|m|h|d)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class Scope:
    text: str  # as written: "once", "session", "1h"
    seconds: float | None = None  # a duration's; None for once and session

    @property
    def once(self) -> bool:
        return self.text == "once"

    def ttl_s(self, timeout_s: float) -> float:
        """How long the grant lives in the state backend."""
        if self.seconds is not None:
            return self.seconds
        return SESSION_S if self.text == "session" else timeout_s


ONCE = Scope("once")


def parse_scope(text: object) -> Scope | None:
    """`once`, `session` or a duration (1s to 30d), else None."""
    if not isinstance(text, str):
        return None
    if text in ("once", "session"):
        return Scope(text)
    match = _DURATION.match(text)
    if match is None:
        return None
    seconds = int(match[1]) * _UNIT_S[match[2]]
    return Scope(text, seconds) if seconds <= MAX_DURATION_S else None


def duration_s(text: object, low: float, high: float) -> float | None:
    """Seconds of `30s`/`5m`/`1h` (or a bare number of seconds) within [low, high]."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION.match(text) if isinstance(text, str) else None
        if match is None:
            return None
        seconds = int(match[1]) * _UNIT_S[match[2]]
    return seconds if low <= seconds <= high else None
