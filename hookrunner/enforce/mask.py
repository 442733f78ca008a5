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
  masked in the next one (D189).
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
    found: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    linked: dict[tuple[int, int], list[str]] = {}
    seen = 0
    pending = [str(root)]
    walked: set[tuple[int, int]] = set()
    with contextlib.suppress(OSError):
        top = os.stat(root)
        walked.add((top.st_dev, top.st_ino))
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            raise MaskIncomplete(f"cannot read {directory}: {exc.strerror or exc}") from None
        seen += len(entries)
        if seen > limit:
            raise MaskIncomplete(f"more than {limit} entries below {root}")
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                raise MaskIncomplete(f"cannot read {entry.path}: {exc.strerror or exc}") from None
            if stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) not in walked:
                    walked.add((info.st_dev, info.st_ino))
                    pending.append(entry.path)
            elif stat.S_ISREG(info.st_mode):
                key = (info.st_dev, info.st_ino)
                if info.st_nlink > 1:
                    linked.setdefault(key, []).append(entry.path)
                if protected_name(entry.name):
                    found.add(entry.path)
                    inodes.add(key)
            elif stat.S_ISLNK(info.st_mode):
                directory_link = _directory(entry.path)
                if directory_link is not None and directory_link[1] not in walked:
                    walked.add(directory_link[1])
                    pending.append(directory_link[0])  # walked at its target (D384)
                target = _protected_target(entry.path, entry.name)
                if target is not None:
                    found.add(target)
    for key in inodes & linked.keys():
        found.update(linked[key])
    return sorted(found)


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


def _protected_target(link: str, name: str) -> str | None:
    """A symlink's final target when it is a regular file named, or reached by, a protected name."""
    target = os.path.realpath(link)
    if not (protected_name(name) or protected_name(os.path.basename(target))):
        return None
    try:
        regular = stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        return None
    return target if regular else None
