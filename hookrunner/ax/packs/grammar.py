"""Bash read with a real grammar (tree-sitter-bash): every simple command a line runs (pure).

The grammar finds the structure: lists, pipelines, compound commands,
function bodies, arithmetic (``((x=1<<2))``, ``$((...))``, ``$[...]``), the
commands inside substitutions wherever they are (words, assignments,
redirection targets, unquoted here-document bodies, arithmetic), and which
here-document bodies are literal (a quoted delimiter). Each word is then read
by the hand lexer (``shell``), which knows quoting, ANSI-C escapes and what
bash still expands (`words.Word`), after brace expansion (``braces``).

Invariants: every ``command`` node of the tree becomes a `Raw` command, inner
ones (substitutions) before the command that holds them; a node the grammar
could not read (``ERROR``, a missing token) or a word that does not read as
one word adds a *problem*: the caller cannot vouch for the text (D91).
"""

from __future__ import annotations

import re
from typing import Any

from sandbox_egress.hookrunner.ax.packs import braces
from sandbox_egress.hookrunner.ax.packs.shell import ShellSyntaxError, split_commands, substitutions
from sandbox_egress.hookrunner.ax.packs.words import Word

try:
    import tree_sitter
    import tree_sitter_bash

    _PARSER: Any = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
except ImportError:  # pragma: no cover - a declared dependency; without it nothing is vouched for
    _PARSER = None

_SEPARATORS = re.compile(rb"^(?:[ \t]|\\\n)+")
_COMMANDS = frozenset({"command", "declaration_command"})
_ASSIGNMENTS = frozenset({"variable_assignment", "variable_assignments"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class Raw:
    """One simple command: its words and redirections, and what feeds its standard input.

    (Plain classes, not dataclasses: the pack's child imports this on every tool call,
    and ``dataclasses`` costs more to import than the grammar.)
    """

    def __init__(self, words: list[str], piped: bool) -> None:
        self.words = words
        self.redirects: list[tuple[str, str]] = []
        self.stdin: str | None = None  # a here-document body or here-string: what it reads
        self.piped = piped  # its standard input is the previous command of a pipeline
        self.inner: list[str] = []  # the substitutions of an unquoted here-document body
        self.upstream: Raw | None = None  # the command piped into this one, when the grammar says
        self.substituted = False  # an argument is a process substitution (``<(...)``, no word)


class Parsed:
    def __init__(self, problems: list[str] | None = None) -> None:
        self.commands: list[Raw] = []
        self.problems: list[str] = problems or []
        self.functions: dict[str, str] = {}  # name -> body text, as defined on the line


def available() -> bool:
    return _PARSER is not None


def read_word(raw: str) -> list[str]:
    """The words (`words.Word`) bash makes of one word as written, after brace expansion."""
    words: list[str] = []
    for alternative in braces.expand(raw):
        found, _ = split_commands(alternative)
        # One word as the grammar cut it is at most one word as bash reads it (none: an
        # empty brace alternative, a process substitution). Anything more (an operator, a
        # blank the grammar took inside a word: tree-sitter-bash reads `$'\\'; cmd \'` as
        # one ANSI-C string) means the grammar misread the structure: not vouched for.
        if len(found) > 1 or any(len(each) != 1 or redirects for each, redirects in found):
            raise ShellSyntaxError(f"not one word: {raw[:60]!r}")
        words.extend(w for each, _ in found for w in each)
    return words


class _Walker:
    def __init__(self, source: bytes) -> None:
        self.source = source
        self.parsed = Parsed()
        self.consumed: set[int] = set()  # nodes whose skipped prefix a word took back

    def text(self, node: Any) -> str:
        """The source of a node (or a byte slice of the source), as written."""
        raw = node if isinstance(node, bytes) else self.source[node.start_byte : node.end_byte]
        return raw.decode("utf-8", "surrogatepass")

    def problem(self, what: str) -> None:
        if what not in self.parsed.problems:
            self.parsed.problems.append(what)

    def walk(self, node: Any, piped: bool = False, upstream: Raw | None = None) -> None:
        if node.type == "ERROR" or node.is_missing:
            self.problem("the shell grammar cannot read part of it")
        if node.type in _COMMANDS:
            self.simple(node, [], piped, upstream)
        elif node.type == "redirected_statement":
            body = node.child_by_field_name("body")
            redirects = [c for c in node.children if c.type in _REDIRECTS]
            tails: list[Any] = []
            for redirect in redirects:
                self.children(redirect, tails)
            if body is not None and body.type in _COMMANDS:
                head = self.simple(body, redirects, piped, upstream, self.dropped(body, redirects))
            else:
                if body is not None:
                    self.walk(body, piped, upstream)
                head = self.emit([], redirects, piped, upstream)
            for tail in tails:  # "cat <<EOF | sh": the grammar nests the pipe in the redirection
                self.tail(tail, head)
        elif node.type in _REDIRECTS:
            self.children(node)
            self.emit([], [node], piped, upstream)
        elif node.type == "pipeline":
            previous = upstream
            for index, child in enumerate(c for c in node.children if c.is_named):
                before = len(self.parsed.commands)
                self.walk(child, piped=piped or index > 0, upstream=previous)
                previous = self.parsed.commands[-1] if len(self.parsed.commands) > before else None
        elif node.type in _ASSIGNMENTS:  # "x='a[$(cmd)]'" alone: a command of assignments
            parts = (
                [c for c in node.children if c.is_named]
                if node.type != "variable_assignment"
                else [node]
            )
            for part in parts:
                self.children(part)
            self.emit(self.joined(parts), [], piped, upstream)
        elif node.type == "test_command":  # [[ 'a[$(cmd)]' -eq 0 ]]: bash evaluates subscripts
            self.children(node)
            self.emit(["[[", *(self.text(n) for n in _operands(node)), "]]"], [], piped, upstream)
        elif node.type == "function_definition":
            name, body = node.child_by_field_name("name"), node.child_by_field_name("body")
            if name is not None and body is not None:
                self.parsed.functions[self.text(name)] = self.text(body)
            self.children(node)
        else:
            self.children(node)

    def tail(self, node: Any, head: Raw | None) -> None:
        """A statement the grammar put inside a here-document's redirection: a pipeline
        continues the command that has the here-document; anything else follows it."""
        if node.type == "pipeline":
            previous = head
            for child in (c for c in node.children if c.is_named):
                before = len(self.parsed.commands)
                if child.type == "pipeline":
                    self.tail(child, previous)
                else:
                    self.walk(child, piped=True, upstream=previous)
                previous = self.parsed.commands[-1] if len(self.parsed.commands) > before else None
        else:  # "cat <<EOF && next": a list, not a pipe
            self.walk(node)

    def children(self, node: Any, tails: list[Any] | None = None) -> None:
        for child in node.children:
            if child.type == "heredoc_body":  # read by `redirect` (the grammar misses backquotes)
                continue
            if (
                tails is not None
                and node.type == "heredoc_redirect"
                and child.is_named
                and (
                    child.type not in ("heredoc_start", "heredoc_end", "file_descriptor")
                    and child.type not in _REDIRECTS
                )
            ):
                tails.append(child)
            else:
                self.walk(child)

    def dropped(self, body: Any, redirects: list[Any]) -> list[str]:
        """Words between a command and its first redirection that the grammar drops
        (``python3 - <<EOF`` loses its ``-``): bash keeps them as arguments."""
        if not redirects:
            return []
        gap = self.source[body.end_byte : redirects[0].start_byte]
        if not gap.strip() or not gap[:1].isspace():
            return []
        self.consumed.add(redirects[0].start_byte)
        return [self.text(part) for part in gap.split()]

    def simple(
        self,
        node: Any,
        redirects: list[Any],
        piped: bool,
        upstream: Raw | None = None,
        extra: list[str] | None = None,
    ) -> Raw | None:
        own = list(redirects)
        parts = []
        for child in node.children:
            self.walk_inside(child)
            if child.type in _REDIRECTS:
                own.append(child)
            elif child.type != "comment":
                parts.append(child)
        made = self.emit(self.joined(parts) + (extra or []), own, piped, upstream)
        if made is not None:
            made.substituted = any(_substitutes(part) for part in parts)
        return made

    def joined(self, nodes: list[Any]) -> list[str]:
        """The words of sibling nodes: nodes with no space between them are one word
        (the grammar leaves ``$"x"`` as ``$`` and a string, bash makes one word)."""
        words: list[str] = []
        end = -1
        for node in nodes:
            gap = self.source[end : node.start_byte] if words else b" "
            if not gap.replace(b"\\\n", b"")[:1].isspace():  # no blank: the same word
                if gap:
                    self.consumed.add(node.start_byte)
                words[-1] += self.text(self.source[end : node.end_byte])
            else:
                # what the grammar skipped that is not a separator (a leading "\ ") is the
                # word's own text: bash keeps it
                kept = _SEPARATORS.sub(b"", gap)
                if kept:
                    self.consumed.add(node.start_byte)
                words.append(self.text(kept + self.source[node.start_byte : node.end_byte]))
            end = node.end_byte
        return words

    def walk_inside(self, node: Any) -> None:
        """The commands inside a word (substitutions), not the word itself."""
        if node.type in _REDIRECTS or node.type in _ASSIGNMENTS:
            self.children(node)
        else:
            self.walk(node) if node.type not in _COMMANDS else self.children(node)

    def emit(
        self, raw_words: list[str], redirects: list[Any], piped: bool, upstream: Raw | None = None
    ) -> Raw | None:
        words: list[str] = []
        for raw in raw_words:
            words.extend(self.word(raw))
        command = Raw(words, piped)
        command.upstream = upstream
        for redirect in redirects:
            self.redirect(redirect, command)
        if not (command.words or command.redirects):
            return None
        self.parsed.commands.append(command)
        return command

    def word(self, raw: str) -> list[str]:
        try:
            return read_word(raw)
        except (ShellSyntaxError, braces.TooMany) as exc:
            self.problem(f"a word that cannot be read ({type(exc).__name__})")
            return [Word(raw, "*", expands=True)]

    def redirect(self, node: Any, command: Raw) -> None:
        operator = next((self.text(c) for c in node.children if not c.is_named), "")
        if node.type == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            delimiter = self.word(self.text(start))[:1] if start is not None else []
            command.redirects.append((operator, delimiter[0] if delimiter else ""))
            body = next((c for c in node.children if c.type == "heredoc_body"), None)
            command.stdin = "" if body is None else self.text(body)
            # "EO\\<newline>F" is EOF, unquoted: bash removes the line continuation first
            spelt = self.text(start).replace("\\\n", "") if start is not None else ""
            quoted = any(q in spelt for q in "'\"\\")
            if not quoted and _ends_early(
                command.stdin, delimiter[0] if delimiter else "", operator
            ):
                self.problem("a here-document that bash ends at a continued line")
            if not quoted:
                try:
                    command.inner.extend(substitutions(command.stdin))
                except ShellSyntaxError:
                    self.problem("a here-document whose substitutions cannot be read")
            return
        targets = [c for c in node.children if c.is_named and c.type != "file_descriptor"]
        if not targets:
            return
        # bash reads words after a redirection as the command's arguments ("> out a b"),
        # the grammar puts them inside the redirection node
        for extra in self.joined(targets[1:]):
            command.words.extend(self.word(extra))
        words = self.word(self.text(targets[0]))
        if node.type == "herestring_redirect":
            command.stdin = " ".join(words)
            command.redirects.append(("<<<", words[0] if words else ""))
            return
        for word in words or [""]:
            command.redirects.append((operator, word))


_OPERAND_NODES = frozenset({"raw_string", "string", "word", "concatenation", "number"})


def _operands(node: Any) -> list[Any]:
    """The words of a ``[[ ... ]]`` (not descending into them): operands bash may evaluate."""
    found, stack = [], list(reversed(node.children))
    while stack:
        child = stack.pop()
        if child.type in _OPERAND_NODES:
            found.append(child)
        else:
            stack.extend(reversed(child.children))
    return found


def _substitutes(node: Any) -> bool:
    """Whether a command's argument holds a process substitution (``<(...)``, ``>(...)``)."""
    stack = [node]
    while stack:
        child = stack.pop()
        if child.type == "process_substitution":
            return True
        if child.type not in ("command_substitution", "subshell"):
            stack.extend(child.children)
    return False


def _ends_early(body: str | None, delimiter: str, operator: str) -> bool:
    """Whether bash ends an unquoted here-document before the grammar does: a body line
    continued (``\\`` at its end) into a line that, joined, is the delimiter (``EO\\⏎F``)."""
    lines = (body or "").split("\n")
    for index, line in enumerate(lines):
        joined, nxt = line, index
        while joined.endswith("\\") and nxt + 1 < len(lines):
            nxt += 1
            joined = joined[:-1] + lines[nxt]
        if operator == "<<-":
            joined = joined.lstrip("\t")
        if nxt > index and joined == delimiter:
            return True
    return False


def parse(text: str) -> Parsed:
    """Every simple command of ``text``; ``problems`` lists what could not be vouched for."""
    if _PARSER is None:  # pragma: no cover
        return Parsed(problems=["the shell grammar (tree-sitter-bash) is not installed"])
    source = text.encode("utf-8", "surrogatepass")
    walker = _Walker(source)
    root = _PARSER.parse(source).root_node
    walker.walk(root)
    if not _covered(source, root, walker.consumed):
        walker.problem("the shell grammar skipped part of it")
    return walker.parsed


def _covered(source: bytes, root: Any, consumed: set[int]) -> bool:
    """Whether every byte between the grammar's tokens is a separator (blanks, newlines,
    line continuations) or was taken back into a word: nothing bash reads was dropped."""
    leaves = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0:
            leaves.append((node.start_byte, node.end_byte))
        else:
            stack.extend(node.children)
    leaves.sort()
    end = 0
    for start, stop in leaves:
        gap = source[end:start] if start > end and start not in consumed else b""
        if _GAP.fullmatch(gap) is None:
            return False
        end = max(end, stop)
    return _GAP.fullmatch(source[end:]) is not None


_GAP = re.compile(rb"(?:[ \t\r\n]|\\\n)*")
