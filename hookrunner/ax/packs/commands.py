"""Commands as a program runs them: wrappers, keywords and inner scripts seen through (pure).

Over the lexer (``shell``): leading ``NAME=value`` assignments and shell
keywords are skipped; wrappers (``sudo``, ``env``, ``command``, ``exec``,
``nohup``, ``time``, ``nice``, ``timeout``, ``xargs``...) with their options
are skipped so ``argv[0]`` is the program that runs; ``sh -c '...'``,
``bash -lc``, ``env -S`` and ``eval`` have their script read recursively, as
have substitutions. What cannot be seen (variables, aliases, functions,
scripts run from files) is listed in docs/hooks.md. Text that does not lex
(an unclosed quote) gives ``complete=False`` and a crude split on separators,
so a guard still looks at every word.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from hookrunner.ax.packs.ansic import ansi_c
from hookrunner.ax.packs.shell import ShellSyntaxError, Word, split_commands

MAX_DEPTH = 8
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "coproc"}
)
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "busybox"})
# Wrapper -> its options that take a separate value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-R", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "setsid": frozenset(),
    "chronic": frozenset(),
    "unbuffer": frozenset(),
    "xargs": frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"}),
}
_TAKES_OPERAND = frozenset({"timeout"})  # the duration before the command
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)


class Command(NamedTuple):
    """One simple command: every word as written (unquoted), its redirections, its argv."""

    words: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]  # after assignments, keywords and wrappers: argv[0] is the program

    @property
    def program(self) -> str:
        return basename(self.argv[0]) if self.argv else ""


class Script(NamedTuple):
    commands: tuple[Command, ...]
    complete: bool  # False: the text did not parse; commands come from a crude split


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _argv(words: list[str]) -> tuple[list[str], list[str]]:
    """The program and its arguments, and the scripts it runs (``sh -c``, ``eval``)."""
    i, scripts = 0, []
    while i < len(words):
        word, name = words[i], basename(words[i])
        if word in _KEYWORDS or _ASSIGNMENT.match(word):
            i += 1
        elif name in _WRAPPERS:
            i += 1
            takes = _WRAPPERS[name]
            while i < len(words) and (
                words[i].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i]))
            ):
                option = words[i]
                if name == "env" and option in ("-S", "--split-string") and i + 1 < len(words):
                    scripts.append(words[i + 1])
                i += 2 if option in takes else 1
            if name in _TAKES_OPERAND:
                i += 1
        else:
            break
    argv = words[i:]
    if argv and basename(argv[0]) in _SHELLS:
        for j, arg in enumerate(argv[1:], 1):
            if not arg.startswith("-"):
                break
            if "c" in arg.lstrip("-") and not arg.startswith("--") and j + 1 < len(argv):
                scripts.append(argv[j + 1])
                break
    if argv and argv[0] == "eval":
        scripts.append(" ".join(argv[1:]))
    return argv, scripts


def read_script(text: str, depth: int = 0) -> Script:
    """Every command a command line runs, inner ones (substitutions, ``sh -c``) first."""
    try:
        found, nested = split_commands(text)
    except ShellSyntaxError:
        return Script(_crude(text), complete=False)
    commands: list[Command] = []
    complete = True
    nested_at: dict[int, list[str]] = {}
    for index, inner in nested:
        nested_at.setdefault(index, []).append(inner)
    for index, (words, redirects) in enumerate(found):
        for inner in nested_at.get(index, []):
            complete &= _extend(commands, inner, depth)
        argv, scripts = _argv(words)
        commands.append(Command(tuple(words), tuple(redirects), tuple(argv)))
        for script in scripts:
            complete &= _extend(commands, script, depth)
    for inner in nested_at.get(len(found), []):
        complete &= _extend(commands, inner, depth)
    return Script(tuple(commands), complete)


def _extend(commands: list[Command], text: str, depth: int) -> bool:
    if depth >= MAX_DEPTH:
        commands.extend(_crude(text))
        return False
    inner = read_script(text, depth + 1)
    commands.extend(inner.commands)
    return inner.complete


def _crude_word(text: str) -> str:
    """A word of unparseable text: ``$'...'`` decoded, and dynamic if ``$`` is left in it."""
    text = _ANSI_C.sub(lambda m: ansi_c(m.group(1)), text).strip("'\"\\")
    return Word(text, "*", expands=True) if "$" in text else Word(text)


def _crude(text: str) -> tuple[Command, ...]:
    """Every word of every separator-delimited piece, quotes dropped: for unparseable text.

    Conservative: a word still holding ``$`` counts as an expansion (`Word.expands`).
    """
    commands = []
    for piece in re.split(r"[;&|\n()`]+|\$\(", text):
        words = [_crude_word(w) for w in piece.split()]
        words = [w for w in words if w]
        if words:
            argv, _ = _argv(words)
            commands.append(Command(tuple(words), (), tuple(argv)))
    return tuple(commands)
