"""Bash's brace expansion on a word as written, before quotes are removed (pure).

``{a,b}`` (two or more comma-separated parts, nested too) and sequences
``{1..3}``, ``{a..e}``, ``{1..10..2}`` expand as bash expands them, left to
right; what is quoted (``'{a,b}'``, ``"{a,b}"``, ``\\{``) or inside an
expansion (``${X}``, ``$(...)``) is not a brace. A word with no unquoted
brace pair is its own single alternative. ``TooMany`` when a word would
expand to more than ``MAX_WORDS`` (the caller cannot verify it, D91).
"""

from __future__ import annotations

MAX_WORDS = 256


class TooMany(ValueError):
    pass


def _skip(text: str, i: int) -> int:
    """The index after a quoted part or expansion starting at ``i`` (or ``i + 1``)."""
    c = text[i]
    if c == "\\":
        return i + 2
    if c == "'" or text.startswith("$'", i):
        start = i + (2 if c == "$" else 1)
        j = start
        while j < len(text) and text[j] != "'":
            j += 2 if c == "$" and text[j] == "\\" else 1
        return j + 1
    if c == '"':
        j = i + 1
        while j < len(text) and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if text.startswith(("${", "$(", "$["), i):
        opening = text[i + 1]
        closing = {"{": "}", "(": ")", "[": "]"}[opening]
        depth, j = 1, i + 2
        while j < len(text) and depth:
            if text[j] in "\\'\"":
                j = _skip(text, j)
                continue
            depth += text[j] == opening
            depth -= text[j] == closing
            j += 1
        return j
    if c == "`":
        j = i + 1
        while j < len(text) and text[j] != "`":
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i + 1


def _top_level(text: str, start: int) -> tuple[int, list[int]] | None:
    """For the ``{`` at ``start``: the index of its ``}`` and of its top-level commas."""
    depth, i = 0, start + 1
    commas: list[int] = []
    while i < len(text):
        c = text[i]
        if c in "\\'\"$`":
            i = _skip(text, i)
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return i, commas
            depth -= 1
        elif c == "," and depth == 0:
            commas.append(i)
        i += 1
    return None


def _sequence(body: str) -> list[str] | None:
    parts = body.split("..")
    if len(parts) not in (2, 3):
        return None
    step_text = parts[2] if len(parts) == 3 else "1"
    try:
        step = abs(int(step_text)) or 1
    except ValueError:
        return None
    first, last = parts[0], parts[1]
    if all(p.lstrip("-").isdigit() for p in (first, last)):
        a, b = int(first), int(last)
        if abs(b - a) // step + 1 > MAX_WORDS:
            raise TooMany(body)
        numbers = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        width = max(len(first), len(last)) if first.lstrip("-").startswith("0") else 0
        return [str(n).zfill(width) for n in numbers]
    if len(first) == 1 == len(last) and first.isalpha() and last.isalpha():
        a, b = ord(first), ord(last)
        codes = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [chr(n) for n in codes]
    return None


def expand(text: str) -> list[str]:
    """Every word bash makes of ``text`` by brace expansion (``[text]`` when none)."""
    i = 0
    while i < len(text):
        c = text[i]
        if c in "\\'\"`" or (c == "$" and text.startswith(("$'", "${", "$(", "$["), i)):
            i = _skip(text, i)
            continue
        if c == "{":
            found = _top_level(text, i)
            if found is not None:
                close, commas = found
                head, tail = text[:i], text[close + 1 :]
                body = text[i + 1 : close]
                if commas:
                    cuts = [i, *commas, close]
                    parts = [text[a + 1 : b] for a, b in zip(cuts, cuts[1:], strict=False)]
                else:
                    parts = _sequence(body) or []
                if parts:
                    words: list[str] = []
                    for part in parts:
                        for rest in expand(part + tail):
                            words.append(head + rest)
                            if len(words) > MAX_WORDS:
                                raise TooMany(text)
                    return words
        i += 1
    return [text]
