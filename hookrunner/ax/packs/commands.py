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

What cannot be vouched for is listed in `Script.problems` and makes
``complete`` false (D91): text the grammar cannot read, a shell or
interpreter reading its program from a pipe, a git alias defined on the
command line, nesting deeper than ``MAX_DEPTH``. Without the grammar
(tree-sitter missing) the hand lexer's crude split is used and nothing is
vouched for.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs import grammar
from sandbox_egress.hookrunner.ax.packs.ansic import ansi_c
from sandbox_egress.hookrunner.ax.packs.words import Word

MAX_DEPTH = 8
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "coproc"}
)
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "busybox", "fish"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$|pypy3?$")
_INLINE = {"perl": "-e", "ruby": "-e", "node": "-e", "nodejs": "-e", "deno": "eval"}
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
    "taskset": frozenset(),
    "chrt": frozenset(),
    "flock": frozenset({"-E", "-w", "--timeout", "--conflict-exit-code"}),
    "chroot": frozenset({"--userspec", "--groups"}),
    "unshare": frozenset({"-S", "-G", "--setuid", "--setgid"}),
    "nsenter": frozenset({"-t", "--target", "-S", "-G"}),
    "setpriv": frozenset({"--reuid", "--regid", "--groups", "--inh-caps", "--bounding-set"}),
    "runuser": frozenset({"-u", "-g", "-G", "--user", "--group"}),
    "strace": frozenset({"-e", "-o", "-p", "-s", "-u", "-E"}),
    "ltrace": frozenset({"-e", "-o", "-p", "-s", "-u"}),
    "prlimit": frozenset({"-p", "--pid"}),
    "caffeinate": frozenset(),
    "firejail": frozenset(),
}
_OPERANDS = {"timeout": 1, "taskset": 1, "chrt": 1, "flock": 1, "chroot": 1}  # before the command
_SCRIPT_OPTIONS = {"su": ("-c", "--command"), "script": ("-c", "--command"), "flock": ("-c",)}
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_NAME = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename", "-regex"})
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
SUPPLIED = Word("{}", "*", expands=True)  # a word xargs or find supplies at run time


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
    complete: bool  # False: part of the text could not be vouched for (see ``problems``)
    codes: tuple[tuple[str, str], ...] = ()  # (interpreter, inline code): python -c ...
    problems: tuple[str, ...] = ()


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class _Inner(NamedTuple):
    scripts: list[str]  # shell text it runs
    argvs: list[list[str]]  # commands it runs (find -exec)
    codes: list[tuple[str, str]]
    reads_stdin: str | None  # the interpreter that reads its program from standard input


def _unwrap(words: list[str]) -> tuple[list[str], list[str], bool]:
    """Skip assignments, keywords and wrappers: (argv, scripts, xargs seen)."""
    i, scripts, supplied = 0, [], False
    while i < len(words):
        word, name = words[i], basename(words[i])
        if word in _KEYWORDS or _ASSIGNMENT.match(word):
            i += 1
            continue
        if name not in _WRAPPERS:
            break
        i += 1
        supplied |= name == "xargs"
        takes = _WRAPPERS[name]
        script_options = _SCRIPT_OPTIONS.get(name, ())
        while i < len(words) and (
            words[i].startswith("-") or (name == "env" and _ASSIGNMENT.match(words[i]))
        ):
            option = words[i]
            if name == "env" and option in ("-S", "--split-string") and i + 1 < len(words):
                scripts.append(words[i + 1])
            if option in script_options and i + 1 < len(words):
                scripts.append(words[i + 1])
                return [], scripts, supplied
            if option == "--":
                i += 1
                break
            i += 2 if option in takes else 1
        i += _OPERANDS.get(name, 0)
        if i + 1 < len(words) and words[i] in script_options:  # flock FILE -c CMD
            return [], [*scripts, words[i + 1]], supplied
    return words[i:], scripts, supplied


def _inner(argv: list[str]) -> _Inner:
    """What the program of ``argv`` runs besides itself."""
    inner = _Inner([], [], [], None)
    if not argv:
        return inner
    program = basename(argv[0])
    options = [a for a in argv[1:] if a.startswith("-")]
    operands = [a for a in argv[1:] if not a.startswith("-")]
    if program in SHELLS or program in _SCRIPT_OPTIONS:
        for j, arg in enumerate(argv[1:], 1):
            if not arg.startswith("-") or arg.startswith("--") and arg != "--command":
                break
            if ("c" in arg.lstrip("-") or arg == "--command") and j + 1 < len(argv):
                inner.scripts.append(argv[j + 1])
                return inner
        if program in SHELLS and not operands or operands == ["-"] or "-s" in options:
            return inner._replace(reads_stdin="sh")
    elif program == "watch":
        start = next((j for j, a in enumerate(argv[1:], 1) if not a.startswith("-")), len(argv))
        inner.scripts.append(" ".join(argv[start:]))
    elif program == "eval":
        inner.scripts.append(" ".join(argv[1:]))
    elif program == "find":
        _find(argv, inner)
    elif _PYTHON.fullmatch(program):
        _python(argv, inner)
    elif program in _INLINE:
        flag = _INLINE[program]
        for j, arg in enumerate(argv[1:-1], 1):
            if arg == flag or (arg.startswith("-") and arg[1:] in ("E", "p", "pe", "ne", "le")):
                inner.codes.append((program, argv[j + 1]))
    return inner


def _python(argv: list[str], inner: _Inner) -> None:
    for j, arg in enumerate(argv[1:], 1):
        if arg == "-c" and j + 1 < len(argv):
            inner.codes.append(("python", argv[j + 1]))
            return
        if arg.startswith("-c") and len(arg) > 2:
            inner.codes.append(("python", arg[2:]))
            return
        if arg in ("-m", "-") or not arg.startswith("-"):
            if arg == "-":
                inner.codes.append(("python", ""))  # filled from the here-document, if any
            return
    inner.codes.append(("python", ""))


def _find(argv: list[str], inner: _Inner) -> None:
    shape = "*"
    j = 1
    while j < len(argv):
        arg = argv[j]
        if arg in _FIND_NAME and j + 1 < len(argv):
            shape = argv[j + 1] if arg != "-regex" else "*"
        if arg in _FIND_EXEC:
            end = next((k for k in range(j + 1, len(argv)) if argv[k] in (";", "+")), len(argv))
            supplied = Word("{}", shape if shape != "*" else "*", expands=True)
            inner.argvs.append([supplied if w == "{}" else w for w in argv[j + 1 : end]])
            j = end
        j += 1


def read_script(text: str, depth: int = 0) -> Script:
    """Every command a command line runs, inner ones (substitutions, ``sh -c``) first."""
    parsed = grammar.parse(text)
    if not grammar.available():  # pragma: no cover - a declared dependency
        return Script(_crude(text), False, (), tuple(parsed.problems))
    out = _Out(list(parsed.problems))
    for raw in parsed.commands:
        for inner in raw.inner:
            out.script(inner, depth)
        out.command(raw.words, raw.redirects, raw.stdin, raw.piped, depth)
    if parsed.problems:  # the grammar could not read all of it: every word is looked at too
        out.commands.extend(_crude(text))
    return Script(tuple(out.commands), not out.problems, tuple(out.codes), tuple(out.problems))


class _Out:
    def __init__(self, problems: list[str]) -> None:
        self.commands: list[Command] = []
        self.codes: list[tuple[str, str]] = []
        self.problems = problems

    def problem(self, what: str) -> None:
        if what not in self.problems:
            self.problems.append(what)

    def command(
        self,
        words: list[str],
        redirects: list[tuple[str, str]],
        stdin: str | None,
        piped: bool,
        depth: int,
    ) -> None:
        argv, scripts, supplied = _unwrap(words)
        if supplied:
            argv = [*argv, SUPPLIED] if argv else argv
        inner = _inner(argv)
        self.commands.append(Command(tuple(words), tuple(redirects), tuple(argv)))
        for script in [*scripts, *inner.scripts]:
            self.script(script, depth)
        for each in inner.argvs:
            self.command(each, [], None, False, depth + 1)
        for language, code in inner.codes:
            if code:
                self.codes.append((language, code))
            elif stdin is not None:
                self.codes.append((language, stdin))
            elif piped:
                self.problem(f"{basename(argv[0])} reads its program from a pipe")
        if inner.reads_stdin is not None:
            if stdin is not None:
                self.script(stdin, depth)
            elif piped:
                self.problem(f"{basename(argv[0])} reads its script from a pipe")
        if basename(argv[0] if argv else "") in ("git", "git.exe") and any(
            w.startswith("alias.") or ".alias." in w for w in argv[1:]
        ):
            self.problem("git runs an alias defined on the command line")

    def script(self, text: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            self.commands.extend(_crude(text))
            self.problem("commands nested too deeply to follow")
            return
        inner = read_script(text, depth + 1)
        self.commands.extend(inner.commands)
        self.codes.extend(inner.codes)
        for problem in inner.problems:
            self.problem(problem)


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
