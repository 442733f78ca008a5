"""Here-documents inside ``$(...)``: where their text ends, for the lexer (pure)."""

from __future__ import annotations

import re

_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z0-9_.-]+)\2[^\n]*\n")


def _after_heredoc(text: str, i: int) -> int:
    """Inside ``$(...)``: the index after a here-document's body and delimiter line (its
    text is not shell: ``pack's`` opens no quote), or after ``<<`` when it is not one."""
    match = _HEREDOC.match(text, i)
    if match is None:
        return i + 2
    tabs, delimiter, j = match.group(1), match.group(3), match.end()
    while j < len(text):
        end = text.find("\n", j)
        end = len(text) if end < 0 else end
        line = text[j:end]
        if (line.lstrip("\t") if tabs else line) == delimiter:
            return end
        j = end + 1
    return len(text)
