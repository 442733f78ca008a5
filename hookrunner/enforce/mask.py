"""Enforcement below the packs: a tool's processes see protected files as empty (D93).

The ``protect-env-files`` pack refuses the spellings it recognises; this
module makes the files themselves unreadable to ``code_execution``, whatever
the spelling (``grep -r``, ``tar``, ``python3 -c``, a compiled program). When
the runner is root (``CAP_SYS_ADMIN``) and ``unshare``, ``mount`` and
``setpriv`` exist, the tool runs in a mount namespace of its own in which every
protected file of the workspace (a regular file named ``.env`` or ``.env.*``,
any case, the pack's rule) has ``/dev/null`` bind-mounted over it: reads give
nothing, writes go nowhere. Only then does it drop to the tool user, who cannot
unmount (no ``CAP_SYS_ADMIN``; in a user namespace of its own the mounts are
locked).

Invariants:
* ``masked`` returns the argv unchanged (and the same user) when the runner
  cannot mask; it never raises for the workspace's contents;
* the namespace has private propagation and dies with its last process: no
  mount is ever visible outside the tool, nothing needs unmounting;
* a mount that fails (a file swapped for a directory meanwhile) stops the tool
  before the program runs (exit 125): never a tool run with a file left readable;
* the workspace is searched through at most ``MAX_ENTRIES`` entries, links not
  followed; files created while the tool runs are not masked (docs/hooks.md,
  "Known limits").
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from sandbox_egress.hookrunner.enforce.contain import Credentials
from sandbox_egress.hookrunner.enforce.contain import _has_capability as has_capability

MAX_ENTRIES = 50_000
_CAP_SYS_ADMIN = 21
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# $1: mount; $2: how many files follow; then the files; then the program and its arguments.
SCRIPT = (
    'mount=$1; n=$2; shift 2; while [ "$n" -gt 0 ]; do '
    '"$mount" --bind /dev/null "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'
)


def protected_name(name: str) -> bool:
    """``.env`` or ``.env.<anything>``, any case: the files ``protect-env-files`` protects."""
    folded = name.casefold()
    return folded == ".env" or folded.startswith(".env.")


def protected_files(root: Path, limit: int = MAX_ENTRIES) -> list[str]:
    """The protected regular files below ``root`` (links not followed), at most ``limit`` seen."""
    found: list[str] = []
    seen = 0
    pending = [str(root)]
    while pending and seen < limit:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                pending.append(entry.path)
            elif stat.S_ISREG(mode) and protected_name(entry.name):
                found.append(entry.path)
    return sorted(found)


def _programs() -> tuple[str, str, str] | None:
    if not has_capability(_CAP_SYS_ADMIN):
        return None
    names = [shutil.which(n, path=_SYSTEM_PATH) for n in ("unshare", "mount", "setpriv")]
    unshare, mount, setpriv = names
    if unshare is None or mount is None or setpriv is None:
        return None
    return unshare, mount, setpriv


def masked(
    argv: Sequence[str], workspace: Path, user: Credentials | None
) -> tuple[list[str], Credentials | None]:
    """``argv`` run with the workspace's protected files masked, and who ``run_process``
    should switch to (None: the masking prefix drops to ``user`` itself)."""
    programs = _programs()
    if programs is None:
        return list(argv), user
    files = protected_files(workspace)
    if not files:
        return list(argv), user
    unshare, mount, setpriv = programs
    program = list(argv)
    if user is not None:
        ids = [f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
        program = [setpriv, *ids, *program]
    prefix = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", SCRIPT]
    return [*prefix, "hookrunner-mask", mount, str(len(files)), *files, *program], None
