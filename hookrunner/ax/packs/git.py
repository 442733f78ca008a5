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
from collections.abc import Sequence
from typing import NamedTuple

from sandbox_egress.hookrunner.ax.packs.commands import Command, basename, read_script
from sandbox_egress.hookrunner.ax.packs.words import is_dynamic

_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
_PUSH_WITH_VALUE = frozenset({"--repo", "--push-option", "--receive-pack", "--exec"})
_CODE_WORD = re.compile(r"[A-Za-z0-9_+\-=:./@*~^]+")


def _is_prefix(name: str, option: str, shortest: int) -> bool:
    return len(name) >= shortest and option.startswith(name)


def _subcommand(argv: Sequence[str]) -> int:
    """The index of git's subcommand, after its global options."""
    i = 1
    while i < len(argv) and argv[i].startswith("-") and not is_dynamic(argv[i]):
        i += 2 if argv[i] in _GLOBAL_WITH_VALUE else 1
    return i


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


def push_force(argv: Sequence[str]) -> str | None:
    """The spelling that makes this argv a forced ``git push`` (or ``send-pack``), or None."""
    argv = _entry_point(argv)
    if not argv or not _is_git(argv[0]):
        return None
    i = _subcommand(argv)
    if i >= len(argv) or argv[i] not in PUSHES:
        return None
    force: str | None = None
    lease: str | None = None
    mirror: str | None = None
    positional_only = expect_value = False
    for arg in argv[i + 1 :]:
        if expect_value:
            expect_value = False
            continue
        if positional_only or not arg.startswith("-") or arg == "-":
            if arg.startswith("+") and len(arg) > 1:
                return arg
            continue
        if arg == "--":
            positional_only = True
            continue
        if arg.startswith("--"):
            name, equals, _ = arg[2:].partition("=")
            if f"--{name}" in _PUSH_WITH_VALUE and not equals:
                expect_value = True
            elif name == "force":
                force = arg
            elif name == "no-force":
                force = None
            elif _is_prefix(name, "force-with-lease", len("force-w")):
                lease = arg
            elif name == "no-force-with-lease":
                lease = None
            elif _is_prefix(name, "mirror", len("mir")):
                mirror = arg
            continue
        cluster = arg[1:]
        for j, flag in enumerate(cluster):
            if flag == "o":  # -o VALUE / -oVALUE: the rest is the push option
                expect_value = j == len(cluster) - 1
                break
            if flag == "f":
                force = arg
    return force or lease or mirror


def hidden_push(argv: Sequence[str]) -> str | None:
    """A word the shell expands where it could make this argv a (forced) push, or None."""
    argv = _entry_point(argv)
    if not argv or not (_is_git(argv[0]) or is_dynamic(argv[0])):
        return None
    i = _subcommand(argv)
    if i >= len(argv):
        return None
    if argv[i] not in PUSHES:
        return f"git {argv[i]}" if _is_git(argv[0]) and is_dynamic(argv[i]) else None
    return next((f"git {argv[i]} {a}" for a in argv[i + 1 :] if is_dynamic(a)), None)


def _verb(argv: Sequence[str]) -> str:
    argv = _entry_point(argv)
    i = _subcommand(argv)
    return argv[i] if 0 < i < len(argv) and argv[i] in PUSHES else "push"


class Push(NamedTuple):
    spelling: str
    seen: bool  # False: a word expanded at run time could make it a force push


def push_in_shell(text: str) -> Push | None:
    """The first command of a shell text that force-pushes, or may (`hidden_push`)."""
    return push_in_commands(read_script(text).commands)


def push_in_commands(commands: Sequence[Command]) -> Push | None:
    for command in commands:
        argv = command.argv
        if argv and is_dynamic(argv[0]) and not _is_git(argv[0]):
            found = push_force(["git", *argv[1:]])  # "$(command -v git)" push -f
        else:
            found = push_force(argv)
        if found is not None:
            return Push(f"git {_verb(argv)} {found}", True)
        hidden = hidden_push(argv)
        if hidden is not None:
            return Push(hidden, False)
    return None


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
