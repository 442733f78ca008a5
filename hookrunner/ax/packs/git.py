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

Code that is not shell (``code_execution`` with ``language: python``) is
scanned line by line for a ``git`` ... ``push`` word sequence, whose words
are then read the same way (``subprocess.run(["git", "push", "-f"])``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hookrunner.ax.packs.commands import basename, read_script

_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
_PUSH_WITH_VALUE = frozenset({"--repo", "--push-option", "--receive-pack", "--exec"})
_CODE_WORD = re.compile(r"[A-Za-z0-9_+\-=:./@*~^]+")


def _is_prefix(name: str, option: str, shortest: int) -> bool:
    return len(name) >= shortest and option.startswith(name)


def push_force(argv: Sequence[str]) -> str | None:
    """The spelling that makes this argv a forced ``git push``, or None."""
    if not argv or basename(argv[0]) not in ("git", "git.exe"):
        return None
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _GLOBAL_WITH_VALUE else 1
    if i >= len(argv) or argv[i] != "push":
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


def force_push_in_shell(text: str) -> str | None:
    for command in read_script(text).commands:
        found = push_force(command.argv)
        if found is not None:
            return f"git push {found}"
    return None


def force_push_in_code(text: str) -> str | None:
    """For code that is not shell: a ``git`` ... ``push`` word sequence on one line."""
    for line in text.splitlines():
        words = _CODE_WORD.findall(line)
        for start, word in enumerate(words):
            if basename(word) in ("git", "git.exe") and "push" in words[start:]:
                found = push_force(words[start:])
                if found is not None:
                    return f"git push {found}"
    return None
