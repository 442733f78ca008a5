"""The grant step: the user's yes, carried to the egress proxy (issue 47, D500, D504).

Claude Code's hooks never learn the answer to an ``ask``; what a yes does is run the
tool with the hook's ``updatedInput``. So for a Bash call naming a held destination the
bridge's ``ask`` carries a command that starts with this step (``command``), and only a
yes ever runs it. It runs in Claude Code's own shell, *outside* the boundary, before the
agent's command (which runs under the boundary, where the token file is masked,
``--mask``): it reads the admin token, allows the approval the bridge made at
``PreToolUse`` ``once`` (``proxyapi.allow_once``), says on stderr what it did, and exits
0 whatever happened, so that the command then runs and meets the proxy: admitted when
granted, held or refused otherwise.

Why the agent cannot run it itself: every Bash command the agent writes runs under the
boundary, where the token file is ``/dev/null``; Claude Code's file tools are refused
the token file by the bridge (``bridge.judge``); a copy of this step's text the agent
finds (a transcript) names an approval, never the token.

Invariants: ``python -I -S`` with the runner's package first on the path, standard
library only; undumpable before the token is read (a process of the same user cannot
read it from its memory); the token never reaches a message; at most one ``allow_once``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import sys
from collections.abc import Sequence

from sandbox_egress.hookrunner.bridge.proxyapi import allow_once

ENTRY = "sandbox_egress.hookrunner.bridge.grant"
BOOT = (
    "import sys; sys.path[:0] = sys.argv[1:2]; "
    f"from {ENTRY} import main; sys.exit(main(sys.argv[2:]))"
)
MAX_TOKEN = 4096
_OPTIONS = ("--admin", "--token-file", "--approval", "--destination")


def command(python: str, root: str, admin: str, token_file: str, approval: str, dest: str) -> str:
    """The shell text of the step (what precedes the wrapped command in ``updatedInput``)."""
    argv = [python, "-I", "-S", "-c", BOOT, root, "--admin", admin, "--token-file", token_file]
    return shlex.join([*argv, "--approval", approval, "--destination", dest])


def _undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def read_token(path: str) -> str | None:
    """The token (whitespace stripped), None when unreadable or implausible."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            raw = os.read(fd, MAX_TOKEN + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    token = raw.decode("utf-8", "replace").strip()
    return token if 16 <= len(token) <= MAX_TOKEN and "\n" not in token else None


def main(argv: Sequence[str]) -> int:
    """``--admin URL --token-file F --approval ID --destination HOST:PORT``; always 0."""
    _undumpable()
    args, given = list(argv), {}
    while len(args) > 1 and args[0] in _OPTIONS:
        given[args[0]], args = args[1], args[2:]
    if args or len(given) != len(_OPTIONS):
        usage = "grant --admin URL --token-file FILE --approval ID --destination HOST:PORT"
        sys.stderr.write(f"hookrunner bridge: usage: {usage}\n")
        return 0
    dest = given["--destination"]
    token = read_token(given["--token-file"])
    if token is None:
        sys.stderr.write(f"hookrunner bridge: {dest} not granted: no admin token readable here\n")
        return 0
    reason = "the Claude Code user said yes"
    done = allow_once(given["--admin"], token, given["--approval"], reason)
    if done.ok:
        sys.stderr.write(f"hookrunner bridge: {dest} allowed once ({given['--approval']})\n")
    else:
        sys.stderr.write(f"hookrunner bridge: {dest} not granted: {done.why}\n")
    return 0
