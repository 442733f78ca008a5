"""Every path of the git binary a tool's PATH finds (``toolns``'s guard mounts over each).

Split out of ``toolns`` (size) with the per-call shortcuts of D433: a directory entry is
resolved only when it leads to a regular file of git's size, a link to a plain name
beside it is resolved without walking the whole path again, and a copy of another inode
is compared with git byte for byte, in chunks.

Invariants: the answer is the one a full resolution of every ``git*`` name gives (each
path that is the binary, by inode or by content); nothing is cached between calls (D388).
"""

from __future__ import annotations

import contextlib
import os
import stat

from sandbox_egress.hookrunner.enforce import leanos

_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
GIT_HOMES = ("/usr/local/bin", "/usr/bin", "/bin", "/usr/lib/git-core", "/usr/libexec/git-core")


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as binary:
        return binary.read(limit + 1)


def git_paths(path_variable: str) -> tuple[str, list[str]] | None:
    """The git binary the tool's PATH finds, and every regular file that is that binary."""
    first = leanos.which("git", path_variable or _SYSTEM_PATH)
    if first is None:
        return None
    real = os.path.realpath(first)
    wanted = os.stat(real)
    # Compared byte for byte, each file once: a git-core holds ~140 copies of git, and
    # hashing each cost ~1 s per call, paid per Bash command by `enforce.bound` (D387).
    # Per Bash call (D433): a name is resolved only when what it leads to is a regular
    # file of git's size, and git itself is read only when such a file is another inode.
    found: set[str] = {real}
    checked: set[str] = {real}
    directories = [*path_variable.split(os.pathsep), *GIT_HOMES]
    for directory in dict.fromkeys(d for d in directories if d):
        with contextlib.suppress(OSError):
            resolved = os.path.realpath(directory)
            for entry in os.scandir(directory):
                if not entry.name.startswith("git") or not _git_sized(entry, wanted.st_size):
                    continue
                target = _resolve(entry, resolved)
                if target in checked:
                    continue
                checked.add(target)
                with contextlib.suppress(OSError):
                    info = os.stat(target)
                    if not stat.S_ISREG(info.st_mode) or info.st_size != wanted.st_size:
                        continue
                    same = (info.st_dev, info.st_ino) == (wanted.st_dev, wanted.st_ino)
                    if same or _same_bytes(real, target, wanted.st_size):
                        found.add(target)
    return real, sorted(found)


def _resolve(entry: os.DirEntry[str], resolved: str) -> str:
    """``os.path.realpath(entry.path)``, ``resolved`` being its directory's: the name itself
    when it is no link, and a link to a plain name beside it (git-core's ~140 ``git-*``
    links to ``git``) without resolving the whole path again."""
    with contextlib.suppress(OSError):
        if not entry.is_symlink():
            return os.path.join(resolved, entry.name)
        text = os.readlink(entry.path)
        if text and "/" not in text and text not in (".", ".."):
            beside = os.path.join(resolved, text)
            if not stat.S_ISLNK(os.lstat(beside).st_mode):
                return beside
    return os.path.realpath(entry.path)


def _same_bytes(one: str, other: str, size: int) -> bool:
    """Whether two files hold the same ``size`` bytes (and no more), read in chunks."""
    chunk = 1 << 20
    with open(one, "rb", buffering=0) as first, open(other, "rb", buffering=0) as second:
        mine, theirs = bytearray(chunk), bytearray(chunk)
        left = size + 1
        while left > 0:
            got, given = first.readinto(mine), second.readinto(theirs)
            if got != given:
                return False
            if (mine != theirs) if got == chunk else (mine[:got] != theirs[:got]):
                return False
            if not got:
                return True
            left -= got
    return True


def _git_sized(entry: os.DirEntry[str], size: int) -> bool:
    """Whether the name leads to a regular file of ``size`` bytes (or cannot be told: the
    full check then decides)."""
    try:
        info = entry.stat()
    except OSError:
        return True
    return stat.S_ISREG(info.st_mode) and info.st_size == size
