"""Commands as a program runs them: wrappers, keywords and inner scripts seen through (pure).

Over the grammar (``grammar``: tree-sitter-bash for the structure, the hand
lexer ``shell`` for each word): leading ``NAME=value`` assignments and shell
keywords are skipped; wrappers (``sudo``, ``env``, ``command``, ``exec``,
``nohup``, ``time``, ``nice``, ``timeout``, ``taskset``, ``chrt``, ``flock``,
``xargs``...) with their options and operands are skipped so ``argv[0]`` is
the program that runs; what other programs run is read too: ``sh -c``,
``bash -lc``, ``su -c``, ``script -qc``, ``watch``, ``env -S`` and ``eval``
scripts (recursively), ``find -exec ... ;`` commands, a shell's script from a
here-document or here-string, and the inline code of ``python -c`` /
``perl -e`` / ``node -e`` / ``ruby -e`` (kept as `Script.codes`, judged as
code). ``xargs`` and ``find -exec`` add the words they supply as expansions
(``{}`` takes the shape of ``find -name``).

What bash runs later is read too (``later``, issue 31): ``trap``/``mapfile -C``/``sg``
commands, quoted substitutions, aliases and functions of the line (`Scope`), git's
configuration from its command line and from the line's ``GIT_CONFIG_*`` variables, and a
shell fed by ``cat <<EOF |`` or ``echo TEXT |``.

What cannot be vouched for is listed in `Script.problems` and makes
``complete`` false (D91): text the grammar cannot read, a shell or
interpreter reading a pipe the pack cannot read, git configured from a
variable, nesting deeper than ``MAX_DEPTH``; `Script.opaque` names those only
the run time can settle (D196). Without the grammar
(tree-sitter missing) the hand lexer's crude split is used and nothing is
vouched for.
"""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs import grammar, later
from sandbox_egress.hookrunner.ax.packs.ansic import ansi_c
from sandbox_egress.hookrunner.ax.packs.inner import SHELLS as SHELLS  # the packs' import
from sandbox_egress.hookrunner.ax.packs.inner import carrying, inner_of
from sandbox_egress.hookrunner.ax.packs.words import Word, is_dynamic
from sandbox_egress.hookrunner.ax.packs.wrappers import _ASSIGNMENT, _WRAPPERS, _unwrap
from sandbox_egress.hookrunner.ax.packs.wrappers import basename as basename  # the packs' import

MAX_DEPTH = 8
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
SUPPLIED = Word("{}", "*", expands=True)  # a word xargs or find supplies at run time
_FROM_ENVIRONMENT = Word("$GIT_CONFIG_…", "*", expands=True)  # git configuration at run time


class Command(NamedTuple):
    """One simple command: every word as written (unquoted), its redirections, its argv."""

    words: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]  # after assignments, keywords and wrappers: argv[0] is the program
    dotglob: bool = False  # globs match dot files here (shopt -s dotglob, GLOBIGNORE)
    later: bool = False  # read from quoted text bash may evaluate later (``x='a[$(cmd)]'``)

    @property
    def program(self) -> str:
        return basename(self.argv[0]) if self.argv else ""


class Script(NamedTuple):
    commands: tuple[Command, ...]
    complete: bool  # False: part of the text could not be vouched for (see ``problems``)
    codes: tuple[tuple[str, str], ...] = ()  # (interpreter, inline code): python -c ...
    problems: tuple[str, ...] = ()
    opaque: tuple[str, ...] = ()  # of ``problems``: only the run time can settle them (D196)


class Scope:
    """What earlier commands leave for later ones: aliases, functions, written-out variables,
    whether globs match dot files (``shopt -s dotglob``)."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, str] = {}
        self.variables: dict[str, str] = {}
        self.dotglob = False

    def without_carriers(self) -> Scope:
        """This scope but the variables that carry shell text (``inner.carrying``)."""
        copy = Scope()
        copy.aliases, copy.functions, copy.dotglob = self.aliases, self.functions, self.dotglob
        copy.variables = {k: v for k, v in self.variables.items() if not carrying(k)}
        return copy


def read_script(text: str, depth: int = 0, scope: Scope | None = None) -> Script:
    """Every command a command line runs, inner ones (substitutions, ``sh -c``) first."""
    parsed = grammar.parse(text)
    if not grammar.available():  # pragma: no cover - a declared dependency
        return Script(_crude(text), False, (), tuple(parsed.problems))
    out = _Out(list(parsed.problems), scope or Scope())
    out.scope.functions.update(parsed.functions)
    for raw in parsed.commands:
        for inner in raw.inner:
            out.script(inner, depth)
        fed = _output(raw.upstream) if raw.upstream is not None else None
        out.command(raw.words, raw.redirects, raw.stdin, raw.piped, depth, fed, raw.substituted)
    if parsed.problems:  # the grammar could not read all of it: every word is looked at too
        out.commands.extend(_crude(text))
    return Script(
        tuple(out.commands), not out.problems, tuple(out.codes), tuple(out.problems),
        tuple(out.opaque),
    )  # fmt: skip


def _output(raw: grammar.Raw) -> str | None:
    """What a command writes to a pipe when its words say (``cat <<EOF``, ``echo TEXT``)."""
    argv, _, _ = _unwrap(raw.words)
    if any(is_dynamic(w) for w in argv) or any(
        op not in ("<<", "<<-", "<<<") for op, _ in raw.redirects
    ):
        return None
    if argv in (["cat"], ["cat", "-"]) and raw.stdin is not None:
        return raw.stdin
    if argv[:1] == ["echo"] and not any(a.startswith("-") for a in argv[1:2]):
        return " ".join(argv[1:]) + "\n"
    if argv[:1] == ["printf"] and len(argv) == 2 and "%" not in argv[1] and "\\" not in argv[1]:
        return argv[1]
    return None


class _Out:
    def __init__(self, problems: list[str], scope: Scope) -> None:
        self.commands: list[Command] = []
        self.codes: list[tuple[str, str]] = []
        self.problems = problems
        self.opaque: list[str] = []  # problems only the run time can settle (D196)
        self.scope = scope

    def problem(self, what: str, opaque: bool = False) -> None:
        if what not in self.problems:
            self.problems.append(what)
        if opaque and what not in self.opaque:
            self.opaque.append(what)

    def command(
        self,
        words: list[str],
        redirects: list[tuple[str, str]],
        stdin: str | None,
        piped: bool,
        depth: int,
        fed: str | None = None,
        substituted: bool = False,
    ) -> None:
        words = self.alias(words, depth)
        if not words and not redirects:
            return  # an alias read as a script of its own (`alias`)
        self.remember(words, depth)
        argv, scripts, supplied = _unwrap(words)
        if supplied:
            argv = [*argv, SUPPLIED] if argv else argv
        argv = self.config_env(argv)
        inner = inner_of(argv, self.scope.variables, substituted)
        for what in inner.unread:
            self.problem(what, opaque=True)
        self.commands.append(
            Command(tuple(words), tuple(redirects), tuple(argv), self.scope.dotglob)
        )
        for script in [*scripts, *inner.scripts, *later.scripts(argv)]:
            self.script(script, depth)
        for script in inner.carried:  # GIT_EDITOR='git ...' must not carry itself again
            self.script(script, depth, self.scope.without_carriers())
        for each in inner.argvs:
            self.command(each, [], None, False, depth + 1)
        for word in words:
            for text in later.quoted_substitutions(word):
                self.mention(text, depth)
        self.call(argv, depth)
        self.git(argv, depth)
        for language, code in inner.codes:
            if code:
                self.codes.append((language, code))
            elif stdin is not None or fed is not None:
                self.codes.append((language, stdin if stdin is not None else fed or ""))
            elif piped:
                self.problem(f"{basename(argv[0])} reads its program from a pipe", opaque=True)
        if inner.reads_stdin is not None:
            if stdin is not None or fed is not None:
                self.script(stdin if stdin is not None else fed or "", depth)
            elif piped:
                self.problem(f"{basename(argv[0])} reads its script from a pipe", opaque=True)

    def alias(self, words: list[str], depth: int) -> list[str]:
        """``p origin main`` after ``alias p='git push -f'``: the alias's words, then the rest."""
        if not words or is_dynamic(words[0]) or words[0] not in self.scope.aliases:
            return words
        text = self.scope.aliases[words[0]]
        inner = read_script(text, depth + 1) if depth < MAX_DEPTH else None
        if inner is not None and len(inner.commands) == 1 and inner.complete:
            return [*inner.commands[0].words, *words[1:]]
        if any(is_dynamic(w) for w in words[1:]):
            self.problem("an alias whose text runs with other commands", opaque=True)
        self.script(" ".join([text, *(shlex.quote(w) for w in words[1:])]), depth)
        return []

    def remember(self, words: list[str], depth: int) -> None:
        """Aliases, assignments and shell options a later command of the line runs with."""
        for word in words:  # NAME=value before the program, also after env/sudo and options
            match = _ASSIGNMENT.match(word)
            if match is None and (basename(word) in _WRAPPERS or word.startswith("-")):
                continue
            if match is None:
                break
            name, value = word[: match.end()].rstrip("+="), word[match.end() :]
            if not is_dynamic(word):
                self.scope.variables[name] = value
            elif name.startswith("GIT_CONFIG") or carrying(name):
                self.scope.variables[name] = word  # a Word: only known at run time
            if name == "GLOBIGNORE" and (value or is_dynamic(word)):
                self.scope.dotglob = True  # bash: a set GLOBIGNORE makes globs match dot files
        program = words[0] if words else ""
        if program in ("export", "declare", "local", "readonly", "typeset"):
            self.remember([w for w in words[1:] if not w.startswith("-")], depth)
        elif program == "alias":
            for word in words[1:]:
                name, equals, value = word.partition("=")
                if equals and not is_dynamic(name):
                    self.scope.aliases[name] = value
                    self.script(value, depth)  # its text is shell, even if never used
        elif program == "shopt" and "-s" in words and any("dotglob" in w for w in words):
            self.scope.dotglob = True

    def config_env(self, argv: list[str]) -> list[str]:
        """``git --config-env=alias.p=P``: ``-c alias.p=VALUE`` when the line gives P a value."""
        if basename(argv[0] if argv else "") not in ("git", "git.exe"):
            return argv
        out: list[str] = []
        for i, arg in enumerate(argv):
            spec = arg.removeprefix("--config-env=") if arg.startswith("--config-env=") else None
            if i > 0 and argv[i - 1] == "--config-env":
                spec, out = arg, out[:-1]
            key, _, variable = (spec or "").rpartition("=")
            if spec is not None and variable in self.scope.variables and not is_dynamic(arg):
                out.extend(["-c", f"{key}={self.scope.variables[variable]}"])
            else:
                out.append(arg)
        return [out[0], *self.config_variables(), *out[1:]]

    def config_variables(self) -> list[str]:
        """git's configuration from the environment the line sets (``GIT_CONFIG_COUNT`` with
        ``GIT_CONFIG_KEY_n``/``VALUE_n``, ``GIT_CONFIG_PARAMETERS``), as ``-c`` options."""
        variables, pairs = self.scope.variables, []
        count = variables.get("GIT_CONFIG_COUNT", "0")
        for n in range(int(count) if count.isdigit() else 0):
            key, value = (
                variables.get(f"GIT_CONFIG_KEY_{n}"),
                variables.get(f"GIT_CONFIG_VALUE_{n}"),
            )
            pairs.append(
                f"{key}={value}" if key is not None and value is not None else _FROM_ENVIRONMENT
            )
        try:
            pairs.extend(shlex.split(variables.get("GIT_CONFIG_PARAMETERS", "")))
        except ValueError:
            pairs.append(_FROM_ENVIRONMENT)
        if any(is_dynamic(v) for k, v in variables.items() if k.startswith("GIT_CONFIG")):
            pairs.append(_FROM_ENVIRONMENT)
        if not count.isdigit():
            pairs.append(_FROM_ENVIRONMENT)
        return [each for pair in pairs for each in ("-c", pair)]

    def call(self, argv: list[str], depth: int) -> None:
        """A function defined on the line, run with its arguments in place of ``"$@"``."""
        if not argv or is_dynamic(argv[0]) or argv[0] not in self.scope.functions:
            return
        body = later.positional(self.scope.functions[argv[0]], argv[1:])
        if body is not None:
            self.script(body, depth)

    def git(self, argv: list[str], depth: int) -> None:
        """git's configuration from its command line: values git runs with the shell."""
        if basename(argv[0] if argv else "") not in ("git", "git.exe"):
            return
        args = argv[1:]
        for i, arg in enumerate(args[:-1]):
            if arg != "-c" and arg != "--config-env":
                continue
            key, _, value = args[i + 1].partition("=")
            if arg == "--config-env" or is_dynamic(args[i + 1]):
                self.problem("git is configured from a variable the line does not set", opaque=True)
            elif later.runs_command(key) or (
                later.git_key(key).startswith("alias.") and value.startswith("!")
            ):
                self.script(value.removeprefix("!"), depth)
            elif later.opaque_key(key):
                self.problem(f"git -c {key} runs files the pack cannot read", opaque=True)
        if any(a.startswith("--config-env=") for a in args):
            self.problem("git is configured from a variable the line does not set", opaque=True)

    def mention(self, text: str, depth: int) -> None:
        """Quoted text bash may evaluate later: its commands count, its oddities do not."""
        if depth < MAX_DEPTH:
            found = read_script(text, depth + 1, self.scope).commands
            self.commands.extend(c._replace(later=True) for c in found)

    def script(self, text: str, depth: int, scope: Scope | None = None) -> None:
        if depth >= MAX_DEPTH:
            self.commands.extend(_crude(text))
            self.problem("commands nested too deeply to follow")
            return
        inner = read_script(text, depth + 1, scope or self.scope)
        self.commands.extend(inner.commands)
        self.codes.extend(inner.codes)
        for problem in inner.problems:
            self.problem(problem, opaque=problem in inner.opaque)


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
            argv, _, _ = _unwrap(words)
            commands.append(Command(tuple(words), (), tuple(argv)))
    return tuple(commands)
