"""Discovery and loading of hooks.json files into one configuration snapshot.

Invariants (docs/hooks.md#discovery):
* the operator file (``/.agents/hooks.json`` or ``--system-config``) comes
  first, then ``<workspace>/.agents/hooks.json``;
* one file reached both ways (the workspace is ``/``, a symlink, a bind mount)
  is loaded once, recognised by device and inode;
* each file is read exactly once, when the session starts; the returned
  ``HookConfig`` is immutable, so later edits change nothing for the session;
* a missing default file is normal; a missing file named explicitly, an
  unreadable file, a file that is not JSON or is too large is a problem and
  the other file still loads;
* a file is opened without blocking and must be a regular file (``fstat``):
  a FIFO, socket or device in its place is a problem, never a hang.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox_egress.common.problems import syntax_problem
from sandbox_egress.hookrunner.model import Group, HookConfig, Problem
from sandbox_egress.hookrunner.schema import loads_strict, validate_document

SYSTEM_CONFIG = Path("/.agents/hooks.json")
WORKSPACE_CONFIG = Path(".agents") / "hooks.json"
MAX_FILE_BYTES = 4 * 1024 * 1024


def candidate_files(workspace: Path, system_config: Path | None) -> list[tuple[Path, bool]]:
    """The files to look at, in order, each with whether it was named explicitly."""
    system = (system_config, True) if system_config is not None else (SYSTEM_CONFIG, False)
    return [system, (workspace / WORKSPACE_CONFIG, False)]


def load_config(workspace: Path, system_config: Path | None = None) -> HookConfig:
    groups: list[Group] = []
    problems: list[Problem] = []
    files: list[str] = []
    seen: set[tuple[int, int]] = set()
    for path, explicit in candidate_files(workspace, system_config):
        found, found_problems, loaded = load_file(path, explicit, seen, validate_document)
        groups.extend(found)
        problems.extend(found_problems)
        if loaded:
            files.append(str(path))
    return HookConfig(tuple(groups), tuple(problems), tuple(files))


class UntrustedFile(Exception):
    """``vouch`` refused the opened file; the message says why (the caller says so)."""


Vouch = Callable[[int], "str | None"]  # why the file open on this descriptor is not trusted


def load_file[T](
    path: Path,
    explicit: bool,
    seen: set[tuple[int, int]],
    validate: Callable[[Any, str], tuple[list[T], list[Problem]]],
    vouch: Vouch | None = None,
) -> tuple[list[T], list[Problem], bool]:
    """One file of any dialect: read once, parsed, validated; whether it was loaded.

    A file already in ``seen`` (the same device and inode reached another way) is
    skipped; a file that is read but not valid JSON counts as loaded, with its problem.
    ``vouch`` judges the opened descriptor before it is read (``UntrustedFile``).
    """
    text, identity, problem = read_config_file(path, explicit, vouch)
    problems = [problem] if problem is not None else []
    if text is None or identity is None or identity in seen:
        return [], problems, False
    seen.add(identity)
    doc, parse_problem = parse_json_file(text, str(path))
    if parse_problem is not None:
        return [], [*problems, parse_problem], True
    found, found_problems = validate(doc, str(path))
    return found, [*problems, *found_problems], True


def read_config_file(
    path: Path, explicit: bool, vouch: Vouch | None = None
) -> tuple[str | None, tuple[int, int] | None, Problem | None]:
    """The text of one configuration file and its (device, inode), or the problem reading it.

    The file is opened once; ``vouch`` judges that descriptor, which is then read (no
    second lookup of the name in between): ``UntrustedFile`` when it refuses."""
    name = str(path)
    try:
        # O_NONBLOCK: a FIFO put where the file should be must not hang the session start.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, None, Problem(name, "$", "not a regular file")
            if vouch is not None and (why := vouch(fd)) is not None:
                raise UntrustedFile(why)
            os.set_blocking(fd, True)
            data = handle.read(MAX_FILE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        missing = Problem(name, "$", "file does not exist") if explicit else None
        return None, None, missing
    except IsADirectoryError:
        return None, None, Problem(name, "$", "not a regular file")
    except OSError as exc:
        return None, None, Problem(name, "$", f"cannot be read: {exc.strerror or exc}")
    if len(data) > MAX_FILE_BYTES:
        return None, None, Problem(name, "$", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, None, Problem(name, "$", f"not UTF-8 (byte offset {exc.start})")
    return text, (info.st_dev, info.st_ino), None


def parse_json_file(text: str, file: str) -> tuple[Any, Problem | None]:
    """The parsed document (duplicate keys kept visible), or the problem that stops it."""
    try:
        return loads_strict(text), None
    except RecursionError:
        return None, syntax_problem(file, "JSON", "nested too deeply", None, None, "$")
    except ValueError as exc:
        line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        detail = getattr(exc, "msg", str(exc))
        return None, syntax_problem(file, "JSON", detail, line, column, "$")
