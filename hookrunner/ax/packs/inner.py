"""What a program runs besides itself, read from its argv and the line's variables (pure).

``inner_of`` answers for one command (``commands`` calls it for every one): the shell
text it runs (``sh -c``, ``watch``, ``eval``, ``git rebase --exec``, the commands git
runs from ``GIT_EDITOR`` and its kin, bash's ``PROMPT_COMMAND``), the commands it runs
(``find -exec``), the inline code of interpreters (``python -c``, ``perl -e``...),
whether it reads its program from standard input (``sh``, ``bash -s``, ``source
/dev/stdin``, ``bash /dev/fd/0``, ``BASH_ENV=/dev/stdin``, ``--rcfile /dev/stdin``),
and what it runs that no reading of the line can know (``unread``: a script from a
process substitution, a carrier variable whose value only the run time knows). Issue
44 (D383) added the carriers and the stdin and process-substitution sources.

Invariant: a carrier whose text is written out is read as shell (its commands are
judged like the line's own); one whose text is not known is named in ``unread`` (the
caller lists it as a problem only the run time can settle, D196). Nothing here decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs import later
from sandbox_egress.hookrunner.ax.packs.words import Word, is_dynamic
from sandbox_egress.hookrunner.ax.packs.wrappers import _SCRIPT_OPTIONS, basename

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "busybox", "fish"})
SOURCING = frozenset({"source", "."})
STDIN_PATHS = frozenset({"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/proc/thread-self/fd/0"})
STARTUP_OPTIONS = frozenset({"--rcfile", "--init-file"})
STARTUP_VARIABLES = ("BASH_ENV", "ENV")  # a file the shell sources first
PROMPT_VARIABLES = ("PROMPT_COMMAND",)  # shell text bash runs before each prompt
# Variables whose value git runs with the shell (``sh -c "VALUE \"$@\""``).
GIT_CARRIERS = (
    "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "EDITOR", "VISUAL", "GIT_PAGER", "PAGER",
    "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND",
)  # fmt: skip
CARRIERS = frozenset({*STARTUP_VARIABLES, *PROMPT_VARIABLES, *GIT_CARRIERS})
_GIT_VALUED = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$|pypy3?$")
_INLINE = {"perl": "-e", "ruby": "-e", "node": "-e", "nodejs": "-e", "deno": "eval"}
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_NAME = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename", "-regex"})


class Inner(NamedTuple):
    scripts: list[str]  # shell text it runs
    argvs: list[list[str]]  # commands it runs (find -exec)
    codes: list[tuple[str, str]]
    reads_stdin: str | None  # the interpreter that reads its program from standard input
    unread: list[str]  # what it runs that only the run time knows (D196)
    carried: list[str]  # shell text from the line's variables (read without them: no loop)


def carrying(name: str) -> bool:
    """Whether an assignment to ``name`` carries shell text or a script's source."""
    return name in CARRIERS


def inner_of(
    argv: list[str], variables: Mapping[str, str] | None = None, substituted: bool = False
) -> Inner:
    """What the program of ``argv`` runs besides itself; ``variables``: what the line set
    (a dynamic value is a `words.Word`); ``substituted``: an argument of the command is a
    process substitution (``<(...)``), which the grammar does not make a word."""
    inner = Inner([], [], [], None, [], [])
    if not argv:
        return inner
    program, given = basename(argv[0]), variables or {}
    starts = program in SHELLS or program in SOURCING
    if starts and _startup(program, argv, given, substituted, inner):
        found = _body(program, argv, given, inner)
        return found._replace(reads_stdin=found.reads_stdin or program)
    return _body(program, argv, given, inner)


def _body(program: str, argv: list[str], given: Mapping[str, str], inner: Inner) -> Inner:
    options = [a for a in argv[1:] if a.startswith("-")]
    operands = [a for a in argv[1:] if not a.startswith("-")]
    if program in SOURCING:
        if operands[:1] and operands[0] in STDIN_PATHS:
            return inner._replace(reads_stdin=program)
    elif program in SHELLS or program in _SCRIPT_OPTIONS:
        for j, arg in enumerate(argv[1:], 1):
            if not arg.startswith("-") or arg.startswith("--") and arg != "--command":
                break
            if ("c" in arg.lstrip("-") or arg == "--command") and j + 1 < len(argv):
                # bash -c 'git "$@"' _ push -f: the script with its arguments in place
                given_args = (
                    later.positional(argv[j + 1], argv[j + 3 :]) if len(argv) > j + 3 else None
                )
                inner.scripts.append(argv[j + 1] if given_args is None else given_args)
                return inner
        script = [o for o in operands if o not in _startup_values(argv)]
        if program in SHELLS and not script or script == ["-"] or "-s" in options:
            return inner._replace(reads_stdin="sh")
        if program in SHELLS and script[0] in STDIN_PATHS:  # bash /dev/stdin
            return inner._replace(reads_stdin="sh")
    elif program == "watch":
        start = next((j for j, a in enumerate(argv[1:], 1) if not a.startswith("-")), len(argv))
        inner.scripts.append(" ".join(argv[start:]))
    elif program == "eval":
        inner.scripts.append(" ".join(argv[1:]))
        if any(is_dynamic(arg) for arg in argv[1:]):  # eval "$(cat push.sh)" (D436)
            inner.unread.append("eval runs text only the run time knows")
    elif program == "find":
        _find(argv, inner)
    elif program in ("git", "git.exe"):
        _git(argv, given, inner)
    elif _PYTHON.fullmatch(program):
        _python(argv, inner)
    elif program in _INLINE:
        flag = _INLINE[program]
        for j, arg in enumerate(argv[1:-1], 1):
            if arg == flag or (arg.startswith("-") and arg[1:] in ("E", "p", "pe", "ne", "le")):
                inner.codes.append((program, argv[j + 1]))
    return inner


def _startup_values(argv: list[str]) -> list[str]:
    return [argv[j + 1] for j, a in enumerate(argv[1:-1], 1) if a in STARTUP_OPTIONS]


def _startup(
    program: str, argv: list[str], given: Mapping[str, str], substituted: bool, inner: Inner
) -> bool:
    """What a shell (or ``source``) reads before its script: ``BASH_ENV``, ``--rcfile``,
    ``PROMPT_COMMAND``, a script from a process substitution; whether it reads a startup
    file from standard input."""
    stdin = False
    if substituted:
        inner.unread.append(f"{program} reads a script from a process substitution")
    files = [given[name] for name in STARTUP_VARIABLES if name in given]
    for j, arg in enumerate(argv[1:], 1):
        if arg in STARTUP_OPTIONS:
            files.append(argv[j + 1] if j + 1 < len(argv) else Word("", "*", expands=True))
    for file in files:
        if is_dynamic(file) or not file:
            inner.unread.append(f"{program} reads a startup file only the run time names")
        elif file in STDIN_PATHS:
            stdin = True
    for name in PROMPT_VARIABLES:
        _carried(given, name, inner)
    return stdin


def _carried(given: Mapping[str, str], name: str, inner: Inner) -> None:
    if name not in given:
        return
    if is_dynamic(given[name]):
        inner.unread.append(f"{name} holds a command only the run time knows")
    else:
        inner.carried.append(given[name])


def _git(argv: list[str], given: Mapping[str, str], inner: Inner) -> None:
    """Commands git runs with the shell: its carrier variables and ``rebase --exec``."""
    for name in GIT_CARRIERS:
        _carried(given, name, inner)
    j = 1
    while j < len(argv) and argv[j].startswith("-"):
        j += 2 if argv[j] in _GIT_VALUED else 1
    if j >= len(argv) or argv[j] != "rebase":
        return
    for k, arg in enumerate(argv[j + 1 :], j + 1):
        if arg in ("--exec", "-x") and k + 1 < len(argv):
            inner.scripts.append(argv[k + 1])
        elif arg.startswith("--exec="):
            inner.scripts.append(arg.removeprefix("--exec="))
        elif arg.startswith("-x") and len(arg) > 2:
            inner.scripts.append(arg[2:])
    for script in inner.scripts:
        if is_dynamic(script):
            inner.unread.append("git rebase --exec runs a command only the run time knows")


def _python(argv: list[str], inner: Inner) -> None:
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


def _find(argv: list[str], inner: Inner) -> None:
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
