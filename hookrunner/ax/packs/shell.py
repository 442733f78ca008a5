"""A small POSIX-shell lexer: the simple commands of a command line, as words (pure).

Enough of the shell for the packs to see through the usual spellings:
* quoting (``'...'``, ``"..."``, backslashes), bash's ANSI-C quoting
  (``$'...'`` with every escape of the bash manual; a NUL ends the quoted part,
  bytes above 0x7f become ``surrogateescape`` characters, as ``os.fsdecode``
  gives them) and locale quoting (``$"..."``, read as ``"..."``: no message
  catalogue is consulted), comments at a word's start, line continuations;
* separators and operators (``;``, ``&&``, ``||``, ``|``, ``&``, newlines,
  subshells and groups), redirections with their targets (``> .env``,
  ``2>/dev/null``, ``&>> log``), here-documents (the body is skipped);
* command substitution (``$(...)``, backticks, also inside double quotes) and
  process substitution (``<(...)``): their text is handed back, for the
  caller (``commands``) to read recursively.

An unclosed quote, substitution or parenthesis raises ``ShellSyntaxError``.

Each word is a `words.Word`: the text with quotes removed, marked dynamic when part of
it is only known when the shell runs.

The differential test (tests/hookrunner/ax/test_lexer_vs_bash.py) checks the
words of the static subset against real bash.
"""

from __future__ import annotations

import re

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.hookrunner.ax.packs.ansic import ansi_c
from sandbox_egress.hookrunner.ax.packs.heredocs import _after_heredoc
from sandbox_egress.hookrunner.ax.packs.words import GLOB, Word, glob_escape

_OPERATORS = sorted(
    ["&&", "||", ";;", "|&", "&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<-", "<<", "<>",
     "<", ">", "|", "&", ";", "(", ")", "\n"],
    key=len,
    reverse=True,
)  # fmt: skip
REDIRECTS = frozenset({"<", ">", ">>", ">|", "<>", "&>", "&>>", ">&", "<&", "<<", "<<-", "<<<"})


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")


class ShellSyntaxError(ValueError):
    pass


Found = tuple[list[str], list[tuple[str, str]]]  # every str is a Word


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.found: list[Found] = []
        self.nested: list[tuple[int, str]] = []  # (command index, inner text)
        self.words: list[str] = []
        self.redirects: list[tuple[str, str]] = []
        self.word: list[str] | None = None
        self.shape: list[str] = []  # the word's glob pattern, while it is read
        self.dynamic = False
        self.expands = False
        self.pending: str | None = None  # a redirection waiting for its target
        self.heredocs: list[tuple[str, bool]] = []

    def add(self, chars: str, *, quoted: bool = True) -> None:
        """Literal text: quoted (glob characters escaped in the shape) or not."""
        if self.word is None:
            self.word, self.shape, self.dynamic, self.expands = [], [], False, False
        self.word.append(chars)
        if quoted:
            self.shape.append(glob_escape(chars))
        else:
            self.shape.append(chars)
            self.dynamic |= bool(GLOB & set(chars))

    def expansion(self, text: str) -> None:
        """Text the shell replaces when it runs (``$X``, ``$(...)``): kept as written."""
        if self.word is None:
            self.word, self.shape = [], []
        self.word.append(text)
        self.shape.append("*")
        self.dynamic = self.expands = True

    def end_word(self) -> None:
        if self.word is None:
            return
        text, self.word = "".join(self.word), None
        word = Word(text, "".join(self.shape) if self.dynamic else None, self.expands)
        if self.pending is not None:
            if self.pending in ("<<", "<<-"):
                self.heredocs.append((word, self.pending == "<<-"))
            self.redirects.append((self.pending, word))
            self.pending = None
        else:
            self.words.append(word)

    def end_command(self) -> None:
        self.end_word()
        if self.words or self.redirects:
            self.found.append((self.words, self.redirects))
        self.words, self.redirects = [], []

    def substitution(self, inner: str) -> None:
        self.nested.append((len(self.found), inner))

    def read(self) -> None:
        text = self.text
        while self.i < len(text):
            c = text[self.i]
            if c in " \t\r":
                self.end_word()
                self.i += 1
            elif c == "\\":
                if text.startswith("\\\n", self.i):
                    self.i += 2
                else:
                    self.add(text[self.i + 1 : self.i + 2])
                    self.i += 2
            elif c == "$" and text.startswith("$'", self.i):
                self.add(ansi_c(self.ansi_c_body()))
            elif c == "$" and text.startswith('$"', self.i):
                self.i += 1
                self.double_quoted()
            elif c == "#" and self.word is None:
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            elif c == "'":
                end = text.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("unclosed single quote")
                self.add(text[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                self.double_quoted()
            elif c == "`":
                inner = self.backticks()
                self.substitution(inner)
                self.expansion("`" + inner + "`")
            elif c == "$" and text.startswith(("$((", "$["), self.i):
                self.expansion(self.arithmetic())  # a number; its substitutions: `grammar`
            elif c == "$" and text.startswith("$(", self.i):
                inner = self.balanced(self.i + 2)
                self.substitution(inner)
                self.expansion("$(" + inner + ")")
            elif c == "$" and text.startswith("${", self.i):
                self.expansion(self.braced())
            elif c == "$" and _NAME.match(text, self.i + 1):
                self.expansion(self.parameter())
            elif c == "(" and self.pending in ("<", ">") and self.word is None:
                self.pending = None  # process substitution: no file, but inner commands
                self.substitution(self.balanced(self.i + 1))
            else:
                op = next((o for o in _OPERATORS if text.startswith(o, self.i)), None)
                if op is None:
                    self.add(c, quoted=False)
                    self.i += 1
                else:
                    self.operator(op)
        if self.pending is not None:
            self.end_word()
        self.end_command()

    def operator(self, op: str) -> None:
        if op in REDIRECTS:
            if self.word is not None and not self.dynamic and "".join(self.word).isdigit():
                self.word = None  # "2>" : the digits are a file descriptor
            self.end_word()
            self.pending = op
            self.i += len(op)
            return
        self.end_command()
        self.i += len(op)
        if op == "\n" and self.heredocs:
            self.skip_heredocs()

    def skip_heredocs(self) -> None:
        for delimiter, tabs in self.heredocs:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if tabs else line) == delimiter:
                    break
        self.heredocs = []

    def double_quoted(self) -> None:
        text, i = self.text, self.i + 1
        chars: list[str] = []

        def flush() -> None:
            if chars:
                self.add("".join(chars))
                chars.clear()

        self.add("")  # "" is a word even when empty
        while i < len(text):
            c = text[i]
            if c == '"':
                flush()
                self.i = i + 1
                return
            if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
                chars.append(text[i + 1] if text[i + 1] != "\n" else "")
                i += 2
            elif c == "`" or (c == "$" and text.startswith(("$(", "${"), i)):
                flush()
                self.i = i
                if c == "`":
                    inner = self.backticks()
                    self.substitution(inner)
                    self.expansion("`" + inner + "`")
                elif text.startswith("$(", i):
                    inner = self.balanced(i + 2)
                    self.substitution(inner)
                    self.expansion("$(" + inner + ")")
                else:
                    self.expansion(self.braced())
                i = self.i
            elif c == "$" and _NAME.match(text, i + 1):
                flush()
                self.i = i
                self.expansion(self.parameter())
                i = self.i
            else:
                chars.append(c)
                i += 1
        raise ShellSyntaxError("unclosed double quote")

    def parameter(self) -> str:
        """``$NAME``, ``$1``, ``$@``...: the text, as written."""
        match = _NAME.match(self.text, self.i + 1)
        if match is None:
            raise InvariantError("parameter() is called on a '$' that starts a name")
        name = match.group(0)
        if name[0].isdigit():
            name = name[0]  # $10 is ${1}0
        self.i += 1 + len(name)
        return "$" + name

    def braced(self) -> str:
        """``${...}`` as written, up to its own ``}`` (quotes and nested ``${`` skipped)."""
        text, i, depth, start = self.text, self.i + 2, 1, self.i
        while i < len(text):
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'":
                end = text.find("'", i + 1)
                i = len(text) if end < 0 else end + 1
            elif c == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
            elif text.startswith("${", i):
                depth, i = depth + 1, i + 2
            elif c == "}":
                depth -= 1
                i += 1
                if depth == 0:
                    self.i = i
                    return text[start:i]
            else:
                i += 1
        raise ShellSyntaxError("unclosed ${")

    def arithmetic(self) -> str:
        """``$((...))`` or ``$[...]`` as written (``<<`` inside is a shift, not a here-document)."""
        start = self.i
        if self.text.startswith("$[", start):
            depth, i = 1, start + 2
            while i < len(self.text) and depth:
                depth += {"[": 1, "]": -1}.get(self.text[i], 0)
                i += 1
            if depth:
                raise ShellSyntaxError("unclosed $[")
            self.i = i
        else:
            self.balanced(start + 2)
        return self.text[start : self.i]

    def ansi_c_body(self) -> str:
        """The raw text between ``$'`` and its closing quote (``\\'`` does not close it)."""
        i = self.i + 2
        while i < len(self.text):
            if self.text[i] == "\\":
                i += 2
            elif self.text[i] == "'":
                body, self.i = self.text[self.i + 2 : i], i + 1
                return body
            else:
                i += 1
        raise ShellSyntaxError("unclosed $' quote")

    def backticks(self) -> str:
        end = self.i + 1
        while end < len(self.text) and self.text[end] != "`":
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise ShellSyntaxError("unclosed backtick")
        inner = self.text[self.i + 1 : end]
        self.i = end + 1
        return inner

    def balanced(self, start: int) -> str:
        """The text up to the parenthesis that closes the one before ``start``."""
        depth, i, text = 1, start, self.text
        while i < len(text):
            c = text[i]
            if c == "\\":
                i += 2
                continue
            if c == "$" and text.startswith("$'", i):
                i += 2
                while i < len(text) and text[i] != "'":
                    i += 2 if text[i] == "\\" else 1
                i += 1
                continue
            if c == "'":
                end = text.find("'", i + 1)
                i = len(text) if end < 0 else end + 1
                continue
            if c == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
                continue
            if text.startswith("<<", i) and not text.startswith("<<<", i):
                i = _after_heredoc(text, i)
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    self.i = i + 1
                    return text[start:i]
            i += 1
        raise ShellSyntaxError("unclosed parenthesis")


def split_commands(text: str) -> tuple[list[Found], list[tuple[int, str]]]:
    """Each simple command's (words, redirections), and each substitution's text with the
    index of the command it belongs to."""
    reader = _Reader(text)
    reader.read()
    return reader.found, reader.nested


def substitutions(text: str) -> list[str]:
    """The commands an unquoted here-document body runs: each ``$(...)`` and backquote's text.

    The body is read as bash reads it (as inside double quotes: ``\\$``, ``\\```
    and ``\\\\`` escape; quotes are plain characters); ``${...}`` is searched too
    (``${X:-$(cmd)}``). Arithmetic ``$((...))`` is searched as a command's text
    would be, which only finds more, never less.
    """
    found: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "`":
            reader = _Reader(text)
            reader.i = i
            inner = reader.backticks()
            found.append(inner)
            i = reader.i
        elif text.startswith("$(", i):
            reader = _Reader(text)
            inner = reader.balanced(i + 2)
            found.append(inner)
            i = reader.i
        elif text.startswith("${", i):
            reader = _Reader(text)
            reader.i = i
            braced = reader.braced()
            found.extend(substitutions(braced[2:-1]))
            i = reader.i
        else:
            i += 1
    return found
