"""A word of a shell command line as the lexer (``shell``) hands it out (pure).

What the lexer does not expand it marks: each word is a `Word` (a ``str``, quotes
removed) whose ``dynamic`` is true when part of it is only known when the shell runs: a
parameter expansion (``$X``, ``${X}``, ``$1``, ``$@``), a command substitution, or an
unquoted glob character. Its ``shape`` is a glob pattern of what it can become: each
expansion is ``*``, quoted glob characters are escaped. Callers must treat a dynamic
word conservatively.
"""

from __future__ import annotations

GLOB = frozenset("*?[")  # the characters that make an unquoted word a pattern


class Word(str):
    """A word with its quotes removed; ``dynamic`` when the shell would still expand part of it."""

    shape: str  # a glob pattern of what it can become (each expansion is "*")
    dynamic: bool  # an expansion or an unquoted glob character
    expands: bool  # an expansion ($X, ${X}, $(...), `...`), not only a glob

    def __new__(cls, text: str, shape: str | None = None, expands: bool = False) -> Word:
        word = super().__new__(cls, text)
        word.shape = text if shape is None else shape
        word.dynamic = shape is not None
        word.expands = expands
        return word


def is_dynamic(word: str) -> bool:
    """Whether the shell still expands part of this word (a `Word` from the lexer)."""
    return isinstance(word, Word) and word.dynamic


def glob_escape(text: str) -> str:
    """`text` as a glob pattern that matches only itself (quoted glob characters)."""
    return "".join(f"[{c}]" if c in GLOB else c for c in text)
