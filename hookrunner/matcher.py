"""Tool-name matchers: RE2 patterns matched against the whole tool name.

Invariants:
* a pattern is compiled once, when the configuration is loaded;
* matching is a full match (``code_execution`` does not match
  ``code_execution_v2``) and is case-sensitive, as RE2 is by default;
* ``"*"``, ``""`` and ``".*"`` match every tool name;
* a pattern that RE2 rejects (the shell glob ``*_file``, a look-ahead, a
  back-reference) produces a matcher that matches nothing and carries the
  RE2 error, so validation can report it and nothing guards by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import re2

MATCH_ALL_PATTERNS = frozenset({"*", "", ".*"})

# RE2 writes its own parse errors to stderr through absl logging unless told
# not to; the runner reports them itself, one line each.
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


@dataclass(frozen=True)
class Matcher:
    """A compiled matcher; build it with :func:`compile_matcher`."""

    pattern: str
    error: str | None = None
    _regexp: Any = field(default=None, compare=False, repr=False)

    @property
    def matches_all(self) -> bool:
        return self.error is None and self.pattern in MATCH_ALL_PATTERNS

    @property
    def valid(self) -> bool:
        return self.error is None

    def matches(self, tool_name: str) -> bool:
        if self.error is not None:
            return False
        if self.pattern in MATCH_ALL_PATTERNS:
            return True
        return self._regexp.fullmatch(tool_name) is not None


def compile_matcher(pattern: str) -> Matcher:
    """Compile ``pattern``; an invalid pattern yields a matcher that matches nothing."""
    if pattern in MATCH_ALL_PATTERNS:
        return Matcher(pattern)
    try:
        regexp = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        return Matcher(pattern, error=_describe(exc))
    return Matcher(pattern, _regexp=regexp)


def _describe(exc: Exception) -> str:
    detail = exc.args[0] if exc.args else exc
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", errors="replace")
    return f"not a valid RE2 pattern ({detail})"
