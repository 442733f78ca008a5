"""AX Code matchers: ``|``-separated tool ids, each exact or a prefix ending in ``*``.

Invariants (AX Code's ``matcherHits``, so AX files work unchanged):
* ``""`` and ``"*"`` match every event, with or without a tool;
* otherwise each alternative (spaces around it ignored) is an exact,
  case-sensitive tool id, or a prefix when it ends in ``*``;
* an event without a tool (``Stop``, ``SessionStart``...) is matched only by
  ``""`` and ``"*"``;
* these are not regular expressions: ``.*`` or ``Edit|Wr.te`` are matched
  literally, and ``suspicious`` says so, for validation to report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REGEX_SIGNS = re.compile(r"[\[\]()+?\\^${}]|\.\*|\*.")


@dataclass(frozen=True)
class AxMatcher:
    pattern: str
    alternatives: tuple[str, ...]

    @property
    def matches_all(self) -> bool:
        return self.pattern in ("", "*")

    def matches(self, tool: str) -> bool:
        if self.matches_all:
            return True
        if not tool:
            return False
        for alternative in self.alternatives:
            if alternative.endswith("*"):
                if tool.startswith(alternative[:-1]):
                    return True
            elif tool == alternative:
                return True
        return False

    @property
    def suspicious(self) -> str | None:
        """Why the pattern looks like a regular expression or glob, or None."""
        for alternative in self.alternatives:
            if _REGEX_SIGNS.search(alternative):
                return (
                    f"alternative {alternative!r} looks like a regular expression; AX matchers "
                    "are exact tool ids or a prefix ending in *, so it is matched literally"
                )
        return None


def compile_ax_matcher(pattern: str) -> AxMatcher:
    parts = tuple(p.strip() for p in pattern.split("|"))
    return AxMatcher(pattern, tuple(p for p in parts if p))
