"""The runner's boundary around a shell command another program runs (``fire``, D380-D382).

Claude Code runs its Bash tool itself. Answering its PreToolUse hook, the runner
replaces the command with one that runs this module (``shell_command``):

    python -I -m sandbox_egress.hookrunner.enforce.bound --workspace WS --cwd-fd 3
        --definitions-fd 5 B64 5<<<"$(declare -f; alias -p; shopt -p)"

which runs the original command (``B64``: its UTF-8 bytes in base64, so no quoting
can change it) with ``SHELL -c`` in the same mount namespace that ``code_execution``
gets (``toolns``: every ``.env`` of the workspace masked, git guarded), on the
caller's own standard input, output and error, in the caller's directory and
environment, and exits with its status (``128 + N`` when killed by signal N, as a
shell reports it). It is one boundary, not a second: the masks are
``mask.protected_files`` and the namespace is ``toolns.tool_namespace``.

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
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandbox_egress.hookrunner.enforce.keep import read_only_paths
from sandbox_egress.hookrunner.enforce.mask import MaskIncomplete, protected_identities
from sandbox_egress.hookrunner.enforce.toolns import tool_namespace

REFUSED = 126  # the shell's "found but cannot run": the command did not start
ENTRY = "sandbox_egress.hookrunner.enforce.bound"
SHELLS = ("bash", "zsh")
# $1 the command, $2 where its final directory goes; the command sees no positional
# parameter, as in Claude Code's own ``eval``.
INNER = (
    "__hookrunner_command=$1 __hookrunner_cwd=$2; shift 2; "
    'eval "$__hookrunner_command" && pwd -P >| "$__hookrunner_cwd"'
)
DEFINITIONS_FD = 5
# The caller's shell functions, aliases and bash options (what Claude Code's shell
# snapshot defined): passed on a descriptor, sourced first inside, then closed.
DEFINITIONS = "declare -f; { alias -p || alias -L; }; shopt -p"
_DEFINED = f'{DEFINITIONS_FD}<<<"$({{ {DEFINITIONS}; }} 2>/dev/null)"'
PREFIX = "hookrunner boundary"


def encode(command: str) -> str:
    return base64.b64encode(command.encode("utf-8", errors="surrogateescape")).decode("ascii")


def decode(text: str) -> str:
    return base64.b64decode(text.encode("ascii"), validate=True).decode(
        "utf-8", errors="surrogateescape"
    )


def shell_command(command: str, workspace: Path, python: str | None = None) -> str:
    """The text that replaces ``command`` in the caller's shell: the command under the
    boundary, then a ``cd`` to where it ended, then its exit status."""
    entry = [python or sys.executable, "-I", "-m", ENTRY, "--workspace", str(workspace)]
    fds = ["--cwd-fd", "3", "--definitions-fd", str(DEFINITIONS_FD)]
    runner = shlex.join([*entry, *fds, encode(command)])
    return (
        f"{{ __hookrunner_cwd=$(exec 3>&1 1>&4 4>&-; exec {runner} {_DEFINED}); }} 4>&1; "
        "__hookrunner_status=$?; "
        '[ -n "$__hookrunner_cwd" ] && cd -- "$__hookrunner_cwd"; '
        "(exit $__hookrunner_status)"
    )


_WRAPPED = re.compile(
    r"\{ __hookrunner_cwd=\$\(exec 3>&1 1>&4 4>&-; exec (?P<python>.+) -I -m "
    + re.escape(ENTRY)
    + r" --workspace .+ --cwd-fd 3 --definitions-fd 5 (''|[A-Za-z0-9+/]+={0,2}) "
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
    try:
        return decode(match.group(2).strip("'"))
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


def shell(env: Mapping[str, str]) -> str:
    """The caller's shell when it is one Claude Code runs commands with, else bash."""
    name = os.path.basename(env.get("SHELL", ""))
    return name if name in SHELLS else "bash"


def refuse(why: str) -> int:
    sys.stderr.write(f"{PREFIX}: {why}; the command was not run\n")
    sys.stderr.flush()
    return REFUSED


def run(
    command: str,
    workspace: Path,
    env: Mapping[str, str],
    cwd_fd: int | None,
    definitions_fd: int | None = None,
) -> int:
    """Run ``command`` under the boundary on this process's descriptors; its exit status.
    ``definitions_fd``: the caller's shell definitions (``DEFINITIONS``), sourced first."""
    try:
        found = protected_identities(workspace)  # mounted only where still so (D438)
        masks = [("/dev/null", path, found[path]) for path in sorted(found)]
    except MaskIncomplete as exc:
        return refuse(f"the .env files cannot all be masked ({exc})")
    handle, cwd_file = tempfile.mkstemp(prefix="hookrunner-cwd-")
    os.close(handle)
    try:
        program = shell(env)  # also its $0, as in the caller's shell
        defined = definitions_fd is not None and _readable(definitions_fd)
        define = f". /dev/fd/{definitions_fd} 2>/dev/null; exec {definitions_fd}<&-; "
        script = (define if defined else "") + INNER
        argv = [program, "-c", script, program, command, cwd_file]
        keep = read_only_paths(env, workspace)  # what runs before the next boundary (D435)
        made, _, inside = tool_namespace(
            argv, [], None, env, lasting=True, keep=keep, checked=masks
        )
        if not inside:
            return refuse("no mount namespace can be made here (no git guard, no mask)")
        code = _wait(made, env, (definitions_fd,) if definitions_fd is not None and defined else ())
        if cwd_fd is not None:
            _report_directory(cwd_file, cwd_fd)
        return code
    finally:
        with contextlib.suppress(OSError):
            os.unlink(cwd_file)


def _readable(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _wait(argv: Sequence[str], env: Mapping[str, str], keep: Sequence[int] = ()) -> int:
    """Run ``argv`` in this process group (the caller's timeout kills it with us), passing
    on the signals a caller sends to this process alone; ``keep``: descriptors it gets."""
    try:
        child = subprocess.Popen(argv, env=dict(env), close_fds=True, pass_fds=tuple(keep))
    except OSError as exc:
        return refuse(f"cannot start {argv[0]}: {exc.strerror or exc}")

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)
    code = child.wait()
    return 128 - code if code < 0 else code


def _report_directory(path: str, fd: int) -> None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            directory = handle.read().rstrip("\n")
        if directory:
            os.write(fd, os.fsencode(directory))
    except OSError:
        pass  # no directory to report: the caller's shell stays where it is
    with contextlib.suppress(OSError):
        os.close(fd)


def main(argv: Sequence[str]) -> int:
    """``--workspace WS [--cwd-fd N] [--definitions-fd N] B64``; a malformed call is
    refused, never run."""
    args = list(argv)
    workspace: str | None = None
    fds: dict[str, int] = {}
    while len(args) > 1 and args[0] in ("--workspace", "--cwd-fd", "--definitions-fd"):
        option, value, args = args[0], args[1], args[2:]
        if option == "--workspace":
            workspace = value
        elif value.isdigit():
            fds[option] = int(value)
    cwd_fd = fds.get("--cwd-fd")
    if workspace is None or len(args) != 1:
        return refuse("usage: bound --workspace DIR [--cwd-fd N] BASE64-COMMAND")
    try:
        command = decode(args[0])
    except (binascii.Error, ValueError):
        return refuse("the command is not base64 of UTF-8 text")
    if "\0" in command:  # no argv, no shell string can hold it (D437)
        return refuse("the command holds a NUL byte, which no shell can run")
    root = Path(os.path.realpath(workspace))
    if not root.is_dir():
        return refuse(f"the workspace {workspace!r} is not a directory")
    if cwd_fd is not None:
        try:
            os.set_inheritable(cwd_fd, False)
        except OSError:
            cwd_fd = None
    return run(command, root, os.environ, cwd_fd, fds.get("--definitions-fd"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
