"""Text bash (or git) runs later than the command that holds it: where it is, as shell (pure).

The grammar finds the commands a line runs now; these are the places where a
word written now becomes a command later (issue 31, round three):
* builtins that keep a command for later: ``trap CMD SIGNAL``, ``mapfile -C CMD``
  (``readarray``), ``complete -C CMD``, ``bind -x 'SEQ: CMD'``, ``sg GROUP [-c] CMD``;
* quoted text that bash evaluates when it is used: an array subscript in arithmetic
  (``x='a[$(cmd)]'; echo $((x))``, ``[[ $x -eq 0 ]]``, ``printf -v "$x"``), a prompt
  expansion (``${x@P}``): every quoted ``$(...)`` or backquote of a word is read as a
  command (`quoted_substitutions`), whatever is done with it;
* aliases (``alias p='git push -f'``) and functions (``f() { git "$@"; }``) defined
  earlier in the same command line: a call is read as their text with its arguments
  (`positional`);
* git's configuration given on its command line: ``-c KEY=VALUE`` where git runs
  ``VALUE`` as a shell command (``core.fsmonitor``, ``core.sshCommand``,
  ``core.pager``, ``alias.X=!...``, `runs_command`; keys are case-insensitive).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from sandbox_egress.hookrunner.ax.packs.shell import ShellSyntaxError, substitutions
from sandbox_egress.hookrunner.ax.packs.words import is_dynamic

# git configuration keys (section.name, or section.*.name) whose value git runs with the shell
_GIT_COMMAND_KEYS = frozenset(
    {"core.fsmonitor", "core.sshcommand", "core.pager", "core.editor", "core.askpass",
     "sequence.editor", "diff.external", "credential.helper", "gpg.program",
     "gpg.*.program", "pager.*", "interactive.difffilter", "filter.*.clean",
     "filter.*.smudge", "filter.*.process", "diff.*.textconv", "diff.*.command",
     "merge.*.driver", "remote.*.receivepack", "remote.*.uploadpack",
     "uploadpack.packobjectshook", "core.gitproxy", "credential.*.helper"}
)  # fmt: skip
# keys that make git run files the pack cannot read (hooks, included configuration)
GIT_OPAQUE_KEYS = frozenset({"core.hookspath", "include.path", "includeif.*.path"})
_POSITIONAL = re.compile(r'"\$(?:@|\*|\{[@*]\})"|\$(?:@|\*|\{[@*]\})|"?\$\{?([1-9])\}?"?')


def git_key(key: str) -> str:
    """A configuration key as git compares it: section and name folded, a subsection kept,
    then any subsection written ``*`` (for the tables above)."""
    section, _, rest = key.partition(".")
    subsection, dot, name = rest.rpartition(".")
    return (
        f"{section.casefold()}.*.{name.casefold()}"
        if dot
        else f"{section.casefold()}.{rest.casefold()}"
    )


def _matches(key: str, table: frozenset[str]) -> bool:
    folded = git_key(key)
    return folded in table or folded.split(".", 1)[0] + ".*" in table


def runs_command(key: str) -> bool:
    return _matches(key, _GIT_COMMAND_KEYS)


def opaque_key(key: str) -> bool:
    return _matches(key, GIT_OPAQUE_KEYS)


def scripts(argv: Sequence[str]) -> list[str]:
    """The shell text a builtin keeps to run later (trap, mapfile -C, sg, ...)."""
    if not argv:
        return []
    program, args = argv[0], list(argv[1:])
    if program == "trap":
        operands = [a for a in args if a != "--" and not a.startswith("-")]
        if args[:1] in (["-p"], ["-l"]) or len(operands) < 2 or operands[0] == "-":
            return []
        return [operands[0]]
    if program in ("mapfile", "readarray", "complete", "compgen"):
        flag = "-C"
        return [args[j + 1] for j, a in enumerate(args[:-1]) if a == flag]
    if program == "bind":
        found = [args[j + 1] for j, a in enumerate(args[:-1]) if a == "-x"]
        return [each.split(":", 1)[1] if ":" in each else each for each in found]
    if program == "sg" and len(args) >= 2:
        rest = args[2:] if args[1] == "-c" else args[1:]
        if args[0] == "-":
            return scripts(["sg", *args[1:]])
        return [" ".join(rest)] if rest else []
    return []


def quoted_substitutions(word: str) -> list[str]:
    """The ``$(...)`` and backquoted commands written inside a word's quoted text (the
    word's shape: substitutions bash runs now are ``*`` there, and read already)."""
    text = getattr(word, "shape", word)
    if "$(" not in text and "`" not in text:
        return []
    try:
        return substitutions(str(text))
    except ShellSyntaxError:
        return []


def positional(text: str, args: Sequence[str]) -> str | None:
    """``text`` (a function body, an alias, an ``sh -c`` script) with ``"$@"``, ``$1``...
    replaced by ``args``; None when an argument is only known at run time."""
    if any(is_dynamic(a) for a in args):
        return None
    quoted = [shlex.quote(a) for a in args]

    def replace(match: re.Match[str]) -> str:
        index = match.group(1)
        if index is None:
            return " ".join(quoted)
        position = int(index) - 1
        return quoted[position] if position < len(quoted) else "''"

    return _POSITIONAL.sub(replace, text)
