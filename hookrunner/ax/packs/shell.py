"""A small POSIX-shell lexer: the simple commands of a command line, as words (pure).

Enough of the shell for the packs to see through the usual spellings:
* quoting (``'...'``, ``"..."``, backslashes), comments at a word's start,
  line continuations;
* separators and operators (``;``, ``&&``, ``||``, ``|``, ``&``, newlines,
  subshells and groups), redirections with their targets (``> .env``,
  ``2>/dev/null``, ``&>> log``), here-documents (the body is skipped);
* command substitution (``$(...)``, backticks, also inside double quotes) and
  process substitution (``<(...)``): their text is handed back, for the
  caller (``commands``) to read recursively.

An unclosed quote, substitution or parenthesis raises ``ShellSyntaxError``.
"""

from __future__ import annotations

_OPERATORS = sorted(
    ["&&", "||", ";;", "|&", "&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<-", "<<", "<>",
     "<", ">", "|", "&", ";", "(", ")", "\n"],
    key=len,
    reverse=True,
)  # fmt: skip
REDIRECTS = frozenset({"<", ">", ">>", ">|", "<>", "&>", "&>>", ">&", "<&", "<<", "<<-", "<<<"})


class ShellSyntaxError(ValueError):
    pass


Found = tuple[list[str], list[tuple[str, str]]]


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.found: list[Found] = []
        self.nested: list[tuple[int, str]] = []  # (command index, inner text)
        self.words: list[str] = []
        self.redirects: list[tuple[str, str]] = []
        self.word: list[str] | None = None
        self.pending: str | None = None  # a redirection waiting for its target
        self.heredocs: list[tuple[str, bool]] = []

    def add(self, chars: str) -> None:
        if self.word is None:
            self.word = []
        self.word.append(chars)

    def end_word(self) -> None:
        if self.word is None:
            return
        word, self.word = "".join(self.word), None
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
                self.add("`" + inner + "`")
            elif c == "$" and text.startswith("$(", self.i):
                inner = self.balanced(self.i + 2)
                self.substitution(inner)
                self.add("$(" + inner + ")")
            elif c == "$" and text.startswith("${", self.i):
                end = text.find("}", self.i)
                if end < 0:
                    raise ShellSyntaxError("unclosed ${")
                self.add(text[self.i : end + 1])
                self.i = end + 1
            elif c == "(" and self.pending in ("<", ">") and self.word is None:
                self.pending = None  # process substitution: no file, but inner commands
                self.substitution(self.balanced(self.i + 1))
            else:
                op = next((o for o in _OPERATORS if text.startswith(o, self.i)), None)
                if op is None:
                    self.add(c)
                    self.i += 1
                else:
                    self.operator(op)
        if self.pending is not None:
            self.end_word()
        self.end_command()

    def operator(self, op: str) -> None:
        if op in REDIRECTS:
            if self.word is not None and "".join(self.word).isdigit():
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
        while i < len(text):
            c = text[i]
            if c == '"':
                self.add("".join(chars))
                self.i = i + 1
                return
            if c == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
                chars.append(text[i + 1] if text[i + 1] != "\n" else "")
                i += 2
            elif text.startswith("$(", i):
                self.i = i
                inner = self.balanced(i + 2)
                self.substitution(inner)
                chars.append("$(" + inner + ")")
                i = self.i
            elif c == "`":
                self.i = i
                inner = self.backticks()
                self.substitution(inner)
                chars.append("`" + inner + "`")
                i = self.i
            else:
                chars.append(c)
                i += 1
        raise ShellSyntaxError("unclosed double quote")

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
