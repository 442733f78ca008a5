"""The runner's boundary around a shell command another program runs (``fire``, D380-D382).

Claude Code runs its Bash tool itself. Answering its PreToolUse hook, the runner
replaces the command with one that runs the boundary (``shell_command``):

    python -I -S -c BOOT ROOT --workspace WS --cwd-fd 3
        --definitions-fd 5 B64 5<<<"$(declare -f; alias -p; shopt -p)"

(``BOOT`` puts the runner's package directory ``ROOT`` first on the path and calls
``boundcall.main``, the lean per-call entry, D430; ``python -I -m`` this module is the
same entry), which runs the original command (``B64``: its UTF-8 bytes in base64, so no quoting
can change it) with ``SHELL -c`` in the same mount namespace that ``code_execution``
gets (``toolns``: every ``.env`` of the workspace masked, git guarded), on the
caller's own standard input, output and error, in the caller's directory and
environment, and exits with its status (``128 + N`` when killed by signal N, as a
shell reports it). It is one boundary, not a second: the masks are
``mask.protected_files`` and the mounts are ``toolns.namespace_plan``'s (made by the
call's own syscalls for a root runner, ``nsdirect``, D432; by ``toolns``'s programs
otherwise).

Invariants:
* fail closed: a walk for the masks that cannot finish, or a namespace that cannot
  be made, refuses the command (exit ``REFUSED``, one line on stderr); it never runs
  unguarded;
* the command runs as it does in Claude Code's own shell (``eval`` of the text,
  positional parameters empty, the caller's functions, aliases and bash options
  sourced first from ``--definitions-fd``); what it leaves running in the background
  outlives it (``lasting``); a root caller keeps uid 0 without any capability;
* the directory the command ends in (when it succeeds) is written to ``--cwd-fd``,
  which ``shell_command`` turns into a ``cd`` in the caller's shell, so a ``cd``
  persists from one Bash call to the next as it does without the runner;
* the interpreter starts isolated (``-I``): ``PYTHONPATH`` and friends of the
  agent's environment do not reach it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from sandbox_egress.hookrunner.enforce.boundcall import REFUSED, SHELLS, shell

__all__ = ["REFUSED", "SHELLS", "shell"]
ENTRY = "sandbox_egress.hookrunner.enforce.bound"
CALL = "sandbox_egress.hookrunner.enforce.boundcall"
# ``python -I -S -c BOOT ROOT ...``: no ``site`` (D430), the package root the runner was
# imported from first on ``sys.path``, then the lean per-call entry.
BOOT = (
    f"import sys; sys.path[:0] = sys.argv[1:2]; from {CALL} import main; "
    "sys.exit(main(sys.argv[2:]))"
)
DEFINITIONS_FD = 5
# The caller's shell functions, aliases and bash options (what Claude Code's shell
# snapshot defined): passed on a descriptor, sourced first inside, then closed.
DEFINITIONS = "declare -f; { alias -p || alias -L; }; shopt -p"
_DEFINED = f'{DEFINITIONS_FD}<<<"$({{ {DEFINITIONS}; }} 2>/dev/null)"'


def encode(command: str) -> str:
    return base64.b64encode(command.encode("utf-8", errors="surrogateescape")).decode("ascii")


def decode(text: str) -> str:
    return base64.b64decode(text.encode("ascii"), validate=True).decode(
        "utf-8", errors="surrogateescape"
    )


def shell_command(
    command: str, workspace: Path, python: str | None = None, masks: Sequence[str] = ()
) -> str:
    """The text that replaces ``command`` in the caller's shell: the command under the
    boundary, then a ``cd`` to where it ended, then its exit status. ``masks``: files
    masked besides the workspace's ``.env`` files (the bridge's token, D505)."""
    entry = [python or sys.executable, "-I", "-S", "-c", BOOT, package_root()]
    entry += ["--workspace", str(workspace)]
    for path in masks:
        entry += ["--mask", path]
    fds = ["--cwd-fd", "3", "--definitions-fd", str(DEFINITIONS_FD)]
    runner = shlex.join([*entry, *fds, encode(command)])
    return (
        f"{{ __hookrunner_cwd=$(exec 3>&1 1>&4 4>&-; exec {runner} {_DEFINED}); }} 4>&1; "
        "__hookrunner_status=$?; "
        '[ -n "$__hookrunner_cwd" ] && cd -- "$__hookrunner_cwd"; '
        "(exit $__hookrunner_status)"
    )


def package_root() -> str:
    """The directory ``sandbox_egress`` was imported from: first on the entry's path."""
    import sandbox_egress

    return os.path.dirname(os.path.dirname(os.path.abspath(sandbox_egress.__file__)))


_WRAPPED = re.compile(
    r"\{ __hookrunner_cwd=\$\(exec 3>&1 1>&4 4>&-; exec (?P<python>.+) -I (?:-m "
    + re.escape(ENTRY)
    + r"|-S -c (?P<boot>'[^']*') (?P<root>\S+))"
    + r" --workspace .+ --cwd-fd 3 --definitions-fd 5 (?P<b64>''|[A-Za-z0-9+/]+={0,2}) "
    + re.escape(_DEFINED)
    + r"\); \} 4>&1; "
    r"__hookrunner_status=\$\?; "
    + re.escape('[ -n "$__hookrunner_cwd" ] && cd -- "$__hookrunner_cwd"; ')
    + re.escape("(exit $__hookrunner_status)"),
    re.DOTALL,
)


def original(text: str) -> str | None:
    """The command ``shell_command`` wrapped, when ``text`` is exactly such a wrapping (what
    Claude Code's PostToolUse carries after ``updatedInput``), else None."""
    match = _WRAPPED.fullmatch(text)
    if match is None or not _ours(match.group("python")):
        return None  # another program in the wrapping's shape: not ours to read (D437)
    boot, root = match.group("boot"), match.group("root")
    if boot is not None and (boot != shlex.quote(BOOT) or root != shlex.quote(package_root())):
        return None  # the lean entry's words (D430), exactly this runner's
    try:
        return decode(match.group("b64").strip("'"))
    except (binascii.Error, ValueError):
        return None


def _ours(quoted: str) -> bool:
    """Whether a wrapping's interpreter is one of this runner's (``python``/``python3``
    beside ``sys.executable``): a look-alike starting another program is not ours."""
    try:
        words = shlex.split(quoted)
    except ValueError:
        return False
    here = os.path.dirname(sys.executable)
    return (
        len(words) == 1
        and os.path.dirname(words[0]) == here
        and os.path.basename(words[0]).startswith("python")
    )


def main(argv: Sequence[str]) -> int:
    """``python -I -m sandbox_egress.hookrunner.enforce.bound`` (D381's spelling, still
    served): the same entry as ``BOOT``'s (``boundcall.main``)."""
    from sandbox_egress.hookrunner.enforce.boundcall import main as call

    return call(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
