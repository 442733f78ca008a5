"""Enforcement below the packs: a tool's processes see protected files as empty (D93, D188-D189).

The ``protect-env-files`` pack refuses the spellings it recognises; this
module finds the files that ``toolns`` makes unreadable to ``code_execution``,
whatever the spelling (``grep -r``, ``tar``, ``python3 -c``, a compiled
program): in the tool's own mount namespace every protected file has
``/dev/null`` bind-mounted over it, so reads give nothing and writes go nowhere.

A protected file is a regular file named ``.env`` or ``.env.*`` (any case, the
pack's rule) below the workspace, the target of a symlink in the workspace
that is named so or points to a file named so (inside or outside the
workspace: the shared ``.env`` of Capistrano and Deployer), and every other
name in the workspace of the same inode (a hard link). "Below the workspace"
includes what a symlinked directory leads to, inside or outside it (D384).
A template that holds no secret is not protected: a name whose last suffix is
one of ``TEMPLATE_SUFFIXES`` (``.env.example``, ``.env.production.sample``,
D385); a link so named that leads to a protected file protects that file.

Invariants:
* the walk sees every entry or raises ``MaskIncomplete``: more than
  ``MAX_ENTRIES`` entries, or a directory it cannot read, refuses the call
  (D188); it never returns a partial list;
* a symlink to a directory is walked at its target, each directory (device and
  inode) once, so a loop ends and the entries it leads to count against the
  bound; a symlink's target is masked only when it is a regular file;
* the walk is made afresh for every call, so a ``.env`` one call creates is
  masked in the next one (D189);
* each directory is read through a descriptor checked to be the directory found, and
  each file is reported with the identity seen there (``protected_identities``), so a
  name swapped while the walk runs or before the masks are mounted refuses the call
  instead of masking another file (D438).
"""

from __future__ import annotations

import contextlib
import os
import stat

TYPE_CHECKING = False  # mypy reads the block below; ``pathlib`` costs a Bash call (D430)
if TYPE_CHECKING:
    from pathlib import Path

MAX_ENTRIES = 200_000
TEMPLATE_SUFFIXES = frozenset({"example", "sample", "template", "dist", "tmpl", "tpl"})


class MaskIncomplete(Exception):
    """The walk could not see every entry; the message says why (the call is refused)."""


def is_template(name: str) -> bool:
    """``.env.example``, ``.env.production.sample``...: an env file's template (D385)."""
    folded = name.casefold()
    return folded.startswith(".env.") and folded.rsplit(".", 1)[1] in TEMPLATE_SUFFIXES


def protected_name(name: str) -> bool:
    """``.env`` or ``.env.<anything>``, any case, but a template: the files
    ``protect-env-files`` protects."""
    folded = name.casefold()
    return (folded == ".env" or folded.startswith(".env.")) and not is_template(folded)


def protected_files(root: Path | str, limit: int = MAX_ENTRIES) -> list[str]:
    """Every path to mask for ``root`` (see the module), sorted; ``MaskIncomplete`` when the
    walk cannot see every entry."""
    return sorted(protected_identities(root, limit))


def protected_identities(root: Path | str, limit: int = MAX_ENTRIES) -> dict[str, str]:
    """``protected_files`` with each file's ``device:inode`` as the walk saw it: a mask is
    mounted only where its path still leads to that file (``toolns``, D438)."""
    found: dict[str, str] = {}
    linked: dict[tuple[int, int], list[str]] = {}
    inodes: set[tuple[int, int]] = set()
    seen = 0
    try:
        top = os.stat(root)
    except OSError as exc:
        raise MaskIncomplete(f"cannot read {root}: {exc.strerror or exc}") from None
    pending = [(str(root), (top.st_dev, top.st_ino))]
    walked = {pending[0][1]}
    while pending:
        directory, key = pending.pop()
        entries = _listing(directory, key)
        seen += len(entries)
        if seen > limit:
            raise MaskIncomplete(f"more than {limit} entries below {root}")
        for name, info in entries:
            path = os.path.join(directory, name)
            here = (info.st_dev, info.st_ino)
            if stat.S_ISDIR(info.st_mode):
                if here not in walked:
                    walked.add(here)
                    pending.append((path, here))
            elif stat.S_ISREG(info.st_mode):
                if info.st_nlink > 1:
                    linked.setdefault(here, []).append(path)
                if protected_name(name):
                    found[path] = _identity(here)
                    inodes.add(here)
            elif stat.S_ISLNK(info.st_mode):
                directory_link = _directory(path)
                if directory_link is not None and directory_link[1] not in walked:
                    walked.add(directory_link[1])
                    pending.append(directory_link)  # walked at its target (D384)
                target = _protected_target(path, name)
                if target is not None:
                    found[target[0]] = _identity(target[1])
    for key in inodes & linked.keys():
        found.update((path, _identity(key)) for path in linked[key])
    return found


def _identity(key: tuple[int, int]) -> str:
    return f"{key[0]}:{key[1]}"


def _listing(directory: str, key: tuple[int, int]) -> list[tuple[str, os.stat_result]]:
    """A directory's entries, read through one descriptor that is checked to be the
    directory the walk found (a swap of names during the walk refuses, D438)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise MaskIncomplete(f"cannot read {directory}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != key:
            raise MaskIncomplete(f"{directory} changed while its .env files were looked for")
        return [(e.name, e.stat(follow_symlinks=False)) for e in list(os.scandir(fd))]
    except OSError as exc:
        raise MaskIncomplete(f"cannot read {directory}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def masked_inodes(root: Path | str) -> set[tuple[int, int]]:
    """(device, inode) of every file ``protected_files`` masks: what the runner's own file
    tools refuse to open (``tools``); ``MaskIncomplete`` as there."""
    found = set()
    for path in protected_files(root):
        with contextlib.suppress(OSError):
            info = os.stat(path)
            found.add((info.st_dev, info.st_ino))
    return found


def _directory(link: str) -> tuple[str, tuple[int, int]] | None:
    """A symlink's final target and its (device, inode) when it is a directory."""
    target = os.path.realpath(link)
    try:
        info = os.stat(target)
    except OSError:
        return None  # dangling, or a loop: nothing to walk
    return (target, (info.st_dev, info.st_ino)) if stat.S_ISDIR(info.st_mode) else None


def _protected_target(link: str, name: str) -> tuple[str, tuple[int, int]] | None:
    """A symlink's final target and its (device, inode) when it is a regular file named, or
    reached by, a protected name."""
    target = os.path.realpath(link)
    if not (protected_name(name) or protected_name(os.path.basename(target))):
        return None
    try:
        info = os.stat(target)
    except OSError:
        return None
    return (target, (info.st_dev, info.st_ino)) if stat.S_ISREG(info.st_mode) else None
