"""block-force-push: does a command line force-push? Every spelling git accepts (pure).

A ``git push`` forces when, after git's own global options (``-C DIR``,
``-c NAME=VALUE``, ``--git-dir=...``) and in any position among its
arguments:
* ``--force`` / ``-f``, also inside a cluster of short flags (``-fu``,
  ``-uf``, ``-vfn``; but not in the value of ``-o``: ``-ofoo``);
* ``--force-with-lease`` (with or without ``=ref[:expect]``) and its
  abbreviations from ``--force-w`` on (git accepts unique prefixes);
* ``--mirror`` (it force-updates every remote ref), also abbreviated;
* a refspec starting with ``+`` (``+main``, ``+HEAD:refs/heads/main``), also
  after ``--``.
The last of ``--force`` / ``--no-force`` (and of ``--force-with-lease`` /
``--no-force-with-lease``) wins, as in git. ``--force-if-includes`` alone
does nothing in git and does not count. Text that only mentions a force push
(``echo "git push -f"``, a commit message) is not one.

A word the shell still expands (``$FLAGS``, ``"$BRANCH"``, ``$(...)``, an
unquoted glob that a file named ``-f`` would match) can be any of those, so
a ``git push`` with one among its arguments, a ``git`` whose subcommand is
one, and a program that is one followed by ``push`` (``"$(command -v git)"
push -f``) are reported too (`hidden_push`): the pack cannot see, so it does
not let through.

Code that is not shell (``code_execution`` with ``language: python``) is
scanned line by line for a ``git`` ... ``push`` word sequence, whose words
are then read the same way (``subprocess.run(["git", "push", "-f"])``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs.commands import Command, basename, read_script
from sandbox_egress.hookrunner.ax.packs.later import git_key
from sandbox_egress.hookrunner.ax.packs.words import is_dynamic

_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
_PUSH_WITH_VALUE = frozenset({"--repo", "--push-option", "--receive-pack", "--exec"})
_CODE_WORD = re.compile(r"[A-Za-z0-9_+\-=:./@*~^]+")


def _subcommand(argv: Sequence[str]) -> int:
    """The index of git's subcommand, after its global options."""
    i = 1
    while i < len(argv) and argv[i].startswith("-") and not is_dynamic(argv[i]):
        i += 2 if argv[i] in _GLOBAL_WITH_VALUE else 1
    return i


def _config(argv: Sequence[str], end: int) -> list[tuple[str, str]]:
    """The ``-c KEY=VALUE`` pairs among git's global options (key as git compares it)."""
    pairs = []
    for j in range(1, end - 1):
        if argv[j] == "-c":
            key, _, value = argv[j + 1].partition("=")
            pairs.append((git_key(key), value))
    return pairs


def _is_git(word: str) -> bool:
    return basename(word) in ("git", "git.exe")


def _entry_point(argv: Sequence[str]) -> Sequence[str]:
    """``/usr/lib/git-core/git-push -f`` is ``git push -f`` (git's other entry points)."""
    if argv and not is_dynamic(argv[0]):
        name = basename(argv[0])
        if name.startswith("git-") and name[4:] in PUSHES:
            return ["git", name[4:], *argv[1:]]
    return argv


PUSHES = ("push", "send-pack")  # send-pack takes --force, --mirror and +refspecs as push does
MAX_ALIASES = 8


def expand_aliases(argv: Sequence[str]) -> tuple[Sequence[str], str | None]:
    """``git -c alias.p='push -f' p`` is ``git push -f`` (git's own expansion, repeated);
    the second item names an alias whose text is only known at run time."""
    for _ in range(MAX_ALIASES):
        i = _subcommand(argv)
        if i >= len(argv) or is_dynamic(argv[i]) or argv[i] in PUSHES:
            return argv, None  # git never lets an alias replace a command of its own
        value = dict(_config(argv, i)).get(git_key(f"alias.{argv[i]}"))
        if value is None or value.startswith("!"):  # "!..." is shell: commands reads it
            return argv, None
        if is_dynamic(value):
            return argv, f"git {argv[i]}"
        try:
            words = shlex.split(value)
        except ValueError:
            return argv, f"git {argv[i]}"
        argv = [*argv[:i], *words, *argv[i + 1 :]]
    return argv, "git aliases nested too deeply"


# long options of git push that force, delete or mirror, and the shortest prefix git takes
# for each (shorter ones are ambiguous and make git stop, so they are counted too)
_FORCING = (("mirror", 1), ("delete", 2), ("prune", 3), ("force-with-lease", 7), ("force", 2))
_UNFORCING = {"no-force": "force", "no-force-with-lease": "force-with-lease"}


def _long(name: str) -> str | None:
    """The forcing option a ``--name`` (git accepts unique prefixes) stands for, if any."""
    if name in _UNFORCING:
        return "no-" + _UNFORCING[name]
    if name.startswith("no-force-w") and "no-force-with-lease".startswith(name):
        return "no-force-with-lease"
    for option, shortest in _FORCING:
        if len(name) >= shortest and option.startswith(name):
            return option
    return None


def push_force(argv: Sequence[str]) -> str | None:
    """The spelling that makes this argv a forced ``git push`` (or ``send-pack``), or None:
    a force, a mirror, a deletion, or configuration that makes a plain push one."""
    argv, _ = expand_aliases(_entry_point(argv))
    if not argv or not _is_git(argv[0]):
        return None
    i = _subcommand(argv)
    if i >= len(argv) or argv[i] not in PUSHES:
        return None
    found: dict[str, str] = {}
    positional_only = expect_value = False
    for arg in argv[i + 1 :]:
        if expect_value:
            expect_value = False
            continue
        if positional_only or not arg.startswith("-") or arg == "-":
            if (arg.startswith("+") or arg.startswith(":")) and len(arg) > 1:
                return arg  # a forced update, or a deletion (":branch")
            continue
        if arg == "--":
            positional_only = True
            continue
        if arg.startswith("--"):
            name, equals, _ = arg[2:].partition("=")
            option = _long(name)
            if f"--{name}" in _PUSH_WITH_VALUE and not equals:
                expect_value = True
            elif option is not None and option.startswith("no-"):
                found.pop(option[3:], None)
            elif option is not None:
                found[option] = arg
            continue
        cluster = arg[1:]
        for j, flag in enumerate(cluster):
            if flag == "o":  # -o VALUE / -oVALUE: the rest is the push option
                expect_value = j == len(cluster) - 1
                break
            if flag in "fd":
                found["force" if flag == "f" else "delete"] = arg
    for key, value in _config(argv, i):
        if key == "remote.*.push" and value.startswith(("+", ":")):
            found.setdefault("config", f"-c {key.replace('*', '…')}={value}")
        if key == "remote.*.mirror" and value.casefold() in ("true", "yes", "on", "1", ""):
            found.setdefault("config", f"-c {key.replace('*', '…')}={value}")
    return next(iter(found.values()), None)


def hidden_push(argv: Sequence[str]) -> str | None:
    """A word the shell expands where it could make this argv a (forced) push, or None."""
    argv, unknown = expand_aliases(_entry_point(argv))
    if not argv or not (_is_git(argv[0]) or is_dynamic(argv[0])):
        return None
    if unknown is not None and _is_git(argv[0]):
        return unknown
    i = _subcommand(argv)
    if i >= len(argv):
        return None
    dynamic_config = [f"git -c {a}" for a in argv[1:i] if is_dynamic(a)]
    if argv[i] in PUSHES and dynamic_config:
        return dynamic_config[0]
    if argv[i] not in PUSHES:
        return f"git {argv[i]}" if _is_git(argv[0]) and is_dynamic(argv[i]) else None
    return next((f"git {argv[i]} {a}" for a in argv[i + 1 :] if is_dynamic(a)), None)


def _verb(argv: Sequence[str]) -> str:
    argv, _ = expand_aliases(_entry_point(argv))
    i = _subcommand(argv)
    return argv[i] if 0 < i < len(argv) and argv[i] in PUSHES else "push"


class Push(NamedTuple):
    spelling: str
    seen: bool  # False: a word expanded at run time could make it a force push


def push_in_shell(text: str) -> Push | None:
    """The first command of a shell text that force-pushes, or may (`hidden_push`)."""
    return push_in_commands(read_script(text).commands)


def push_in_commands(commands: Sequence[Command]) -> Push | None:
    """The first push a command forces, else the first whose force is only known at run time."""
    hidden: Push | None = None
    for command in commands:
        argv = command.argv
        if argv and is_dynamic(argv[0]) and not _is_git(argv[0]):
            found = push_force(["git", *argv[1:]])  # "$(command -v git)" push -f
        else:
            found = push_force(argv)
        if found is not None:
            return Push(f"git {_verb(argv)} {found}", True)
        spelling = hidden_push(argv)
        if spelling is not None and hidden is None:
            hidden = Push(spelling, False)
    return hidden


def force_push_in_shell(text: str) -> str | None:
    found = push_in_shell(text)
    return None if found is None else found.spelling


def force_push_in_code(text: str) -> str | None:
    """For code that is not shell: a ``git`` ... ``push`` word sequence on one line."""
    for line in text.splitlines():
        words = _CODE_WORD.findall(line)
        for start in range(len(words)):
            rest = list(_entry_point(words[start:]))
            if _is_git(rest[0]) and any(p in rest for p in PUSHES):
                found = push_force(rest)
                if found is not None:
                    return f"git push {found}"
    return None
