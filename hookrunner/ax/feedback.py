"""PostToolUse feedback: bounded text for the model, in a ``<hook_feedback>`` block (pure).

Invariants (docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson):
* each hook contributes at most ``PER_HOOK_CHARS`` characters and one tool call
  at most ``PER_CALL_CHARS`` (the block's body, separators and truncation
  markers included; the two tag lines are not counted);
* characters are Unicode code points, never bytes, so a cut never splits a
  UTF-8 sequence; it also steps back (a little) rather than split a joined
  sequence (an emoji ZWJ sequence, a combining mark, a variation selector);
* a cut is visible: the kept text ends with a marker saying how much there was;
* the block comes after the tool's own output and never replaces it; a
  closing tag inside a hook's text is defused (same length) so feedback cannot
  end its block early;
* no feedback, no block: the output is returned unchanged.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

PER_HOOK_CHARS = 4000
PER_CALL_CHARS = 8000
NOTICE_CHARS = 4000  # a hook's notice to the user (systemMessage), per hook and in the block
OPEN_TAG = '<hook_feedback event="PostToolUse">'
CLOSE_TAG = "</hook_feedback>"
_SEPARATOR = "\n\n"
_CLOSING = "</hook_feedback"
_DEFUSED = "<\u2215hook_feedback"  # DIVISION SLASH: same length, no longer a closing tag
_ZWJ = "\u200d"
_MAX_BACKOFF = 32


def bound(text: str, limit: int, *, what: str = "hook feedback") -> str:
    """``text`` trimmed; when longer than ``limit`` cut so that text plus marker fit in it."""
    text = text.strip()
    if len(text) <= limit:
        return text
    marker = f"\n[{what} truncated: {len(text)} characters, limit {limit}]"
    # The limits in use are thousands of characters; the marker is about fifty.
    cut = max(0, limit - len(marker))
    for _ in range(_MAX_BACKOFF):
        if cut == 0 or not _joined(text[cut - 1], text[cut]):
            break
        cut -= 1
    return text[:cut] + marker


def _joined(before: str, after: str) -> bool:
    """Whether a cut between these two code points would split one visible character."""
    if _ZWJ in (before, after) or unicodedata.combining(after):
        return True
    code = ord(after)
    return 0xFE00 <= code <= 0xFE0F or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F


def defuse(text: str) -> str:
    return text.replace(_CLOSING, _DEFUSED)


def hook_feedback(text: str) -> str | None:
    """One hook's contribution (trimmed, defused, at most PER_HOOK_CHARS), or None when empty."""
    bounded = bound(defuse(text), PER_HOOK_CHARS)
    return bounded or None


def feedback_block(pieces: Iterable[str]) -> str | None:
    """The block for one tool call from the hooks' contributions, in hook order."""
    kept = [p for p in pieces if p]
    if not kept:
        return None
    body = _SEPARATOR.join(kept)
    if len(body) > PER_CALL_CHARS:
        body = bound(body, PER_CALL_CHARS, what="feedback of this tool call")
    return f"{OPEN_TAG}\n{body}\n{CLOSE_TAG}"


def with_feedback(output: str, block: str | None) -> str:
    return output if block is None else f"{output}\n\n{block}"
