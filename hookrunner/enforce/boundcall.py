"""One Bash call under the runner's boundary: the lean per-call entry of ``enforce.bound``.

Every Bash call of an agent in ``fire`` starts this module (``bound.shell_command``,
D380), so what it imports is paid per call (D430): the interpreter starts with
``-I -S`` (no ``site``: no ``.pth`` file, no editable-install finder; the package
root is put first on ``sys.path`` by ``bound.BOOT`` from the runner's own argument)
and this module imports only ``os``, ``sys``, ``signal``, ``binascii``, ``mask`` and
``toolns``: no ``subprocess``, ``tempfile``, ``base64`` or ``re``.

Behaviour is ``enforce.bound``'s (see there): the masks are ``mask.protected_files``
walked afresh for this call (D189, no cache, D431), the namespace is
``toolns.tool_namespace``.

Invariants:
* fail closed: a walk that cannot finish, or a namespace that cannot be made,
  refuses the command (exit ``REFUSED``, one line on stderr); it never runs unguarded;
* the program gets the caller's standard descriptors and ``--definitions-fd`` only
  (every other descriptor is closed in the child), runs in this process group, and
  gets the signals a caller sends to this process alone;
* the directory the command ends in is written to ``--cwd-fd`` (see ``bound``).
"""

from __future__ import annotations

import binascii
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path  # ``keep`` and ``mask`` (D435, D438) take paths

from sandbox_egress.hookrunner.enforce.keep import prepare
from sandbox_egress.hookrunner.enforce.mask import MaskIncomplete, protected_identities
from sandbox_egress.hookrunner.enforce.toolns import tool_namespace

REFUSED = 126  # the shell's "found but cannot run": the command did not start
SHELLS = ("bash", "zsh")
# $1 the command, $2 where its final directory goes; the command sees no positional
# parameter, as in Claude Code's own ``eval``.
INNER = (
    "__hookrunner_command=$1 __hookrunner_cwd=$2; shift 2; "
    'eval "$__hookrunner_command" && pwd -P >| "$__hookrunner_cwd"'
)
PREFIX = "hookrunner boundary"


def decode(text: str) -> str:
    """The command from its base64 text (strict: no character outside the alphabet)."""
    raw = binascii.a2b_base64(text.encode("ascii"), strict_mode=True) if text else b""
    return raw.decode("utf-8", errors="surrogateescape")


def shell(env: Mapping[str, str]) -> str:
    """The caller's shell when it is one Claude Code runs commands with, else bash."""
    name = os.path.basename(env.get("SHELL", ""))
    return name if name in SHELLS else "bash"


def refuse(why: str) -> int:
    sys.stderr.write(f"{PREFIX}: {why}; the command was not run\n")
    sys.stderr.flush()
    return REFUSED


def _private_file() -> str:
    """A new empty file only this user can read, in ``$TMPDIR`` or ``/tmp``."""
    given = os.environ.get("TMPDIR", "")
    directory = given if os.path.isabs(given) and os.path.isdir(given) else "/tmp"
    for _ in range(16):
        path = os.path.join(directory, f"hookrunner-cwd-{os.urandom(8).hex()}")
        with contextlib.suppress(FileExistsError):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(path, flags, 0o600))
            return path
    raise FileExistsError(directory)


def run(
    command: str,
    workspace: str,
    env: Mapping[str, str],
    cwd_fd: int | None,
    definitions_fd: int | None = None,
    extra: Sequence[str] = (),
) -> int:
    """Run ``command`` under the boundary on this process's descriptors; its exit status.
    ``definitions_fd``: the caller's shell definitions (``bound.DEFINITIONS``), sourced first.
    ``extra``: more files to mask (the approvals bridge's admin token, D505)."""
    try:
        found = protected_identities(Path(workspace))  # mounted only where still so (D438)
        masks = [("/dev/null", path, found[path]) for path in sorted(found)]
    except MaskIncomplete as exc:
        return refuse(f"the .env files cannot all be masked ({exc})")
    for given in extra:
        try:
            path = os.path.realpath(given)
            info = os.stat(path)
        except OSError as exc:
            return refuse(f"{given!r} cannot be masked ({exc.strerror or exc})")
        masks.append(("/dev/null", path, f"{info.st_dev}:{info.st_ino}"))
    try:
        cwd_file = _private_file()
    except OSError as exc:
        return refuse(f"no private file for the final directory ({exc.strerror or exc})")
    try:
        program = shell(env)  # also its $0, as in the caller's shell
        defined = definitions_fd is not None and _readable(definitions_fd)
        define = f". /dev/fd/{definitions_fd} 2>/dev/null; exec {definitions_fd}<&-; "
        script = (define if defined else "") + INNER
        argv = [program, "-c", script, program, command, cwd_file]
        # What runs before the next boundary (D435); with the bridge's token, git's too (D543).
        unkept, keep = prepare(env, Path(workspace), git=bool(extra))
        if unkept is not None:
            return refuse(f"{unkept} (remove it or make its target)")
        made, _, inside = tool_namespace(
            argv, [], None, env, lasting=True, keep=keep, checked=masks
        )
        if not inside:
            return refuse("no mount namespace can be made here (no git guard, no mask)")
        kept = definitions_fd if definitions_fd is not None and defined else None
        code = _wait(made, env, kept)
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


def _program(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """``argv[0]`` as ``execvpe`` would find it on the caller's PATH (``subprocess``'s rule)."""
    if os.sep in argv[0]:
        return argv[0]
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", argv[0])
        if os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return candidate
    return None


def _wait(argv: Sequence[str], env: Mapping[str, str], keep: int | None) -> int:
    """Run ``argv`` in this process group (the caller's timeout kills it with us), passing
    on the signals a caller sends to this process alone; ``keep``: a descriptor it gets."""
    if any("\0" in word for word in argv) or any("\0" in k + v for k, v in env.items()):
        return refuse("a NUL byte cannot be passed to a program")
    path = _program(argv, env)
    if path is None:
        return refuse(f"cannot start {argv[0]}: not found")
    pid = os.fork()
    if pid == 0:  # the child: only 0-2 and ``keep``, then the namespace's program
        try:
            if keep is None or keep < 3:
                os.closerange(3, 1 << 20)
            else:
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 20)
                os.set_inheritable(keep, True)
            os.execve(path, list(argv), dict(env))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.write(2, f"{PREFIX}: cannot start {argv[0]}: {exc.strerror}\n".encode())
        os._exit(REFUSED)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)
    _, status = os.waitpid(pid, 0)  # retried after a forwarded signal (PEP 475)
    code = os.waitstatus_to_exitcode(status)
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


def _venv_prefix() -> None:
    """``sys.prefix`` as ``site`` sets it in a virtual environment (``-S`` skips that):
    ``keep`` makes the runner's install read-only by it (D435)."""
    here = os.path.dirname(sys.executable)
    for candidate in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(candidate, "pyvenv.cfg")):
            sys.prefix = sys.exec_prefix = candidate
            return


def main(argv: Sequence[str]) -> int:
    """``--workspace WS [--mask FILE]... [--cwd-fd N] [--definitions-fd N] B64``; a
    malformed call is refused, never run."""
    _venv_prefix()
    args = list(argv)
    workspace: str | None = None
    extra: list[str] = []
    fds: dict[str, int] = {}
    while len(args) > 1 and args[0] in ("--workspace", "--mask", "--cwd-fd", "--definitions-fd"):
        option, value, args = args[0], args[1], args[2:]
        if option == "--workspace":
            workspace = value
        elif option == "--mask":
            extra.append(value)
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
    root = os.path.realpath(workspace)
    if not os.path.isdir(root):
        return refuse(f"the workspace {workspace!r} is not a directory")
    if cwd_fd is not None:
        try:
            os.set_inheritable(cwd_fd, False)
        except OSError:
            cwd_fd = None
    return run(command, root, os.environ, cwd_fd, fds.get("--definitions-fd"), extra)
