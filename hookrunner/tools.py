"""The built-in tools that ``hookrunner exec`` runs between the hooks.

Invariants (SPEC 5):
* every path (absolute, relative to the workspace, or reached through
  symlinks) must stay inside the workspace after resolving symlinks; one that
  leaves it is a failed operation, nothing is touched;
* ``code_execution`` runs ``bash -c CODE`` or ``python3 -c CODE`` in the
  workspace with the sanitised environment, an empty stdin, the same process
  group discipline and output cap as command hooks, and a deadline;
* a tool never raises for what the agent asked: bad arguments, missing files
  and failing code all come back as a ``ToolResult`` with ``ok=False`` and the
  failure text in ``error``; ``error`` also carries stderr of code that exited 0.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hookrunner.command import OUTPUT_CAP, run_process

TOOLS = ("code_execution", "read_file", "write_file", "list_files", "delete_file")
LANGUAGES = {"bash": "bash", "python": "python3"}
MAX_READ_BYTES = OUTPUT_CAP


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    output: str
    error: str | None = None


class ToolFailure(Exception):
    """A failed operation; the message is what the agent and the post hooks see."""


class Workspace:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(os.path.realpath(root))

    def contains(self, path: Path) -> bool:
        return path == self.root or self.root in path.parents

    def lexical(self, path: str) -> Path:
        if not path or "\x00" in path:
            raise ToolFailure("path must be a non-empty string without NUL")
        return self.root / path  # an absolute path replaces the root

    def resolve(self, path: str) -> Path:
        """The real path (symlinks resolved), refused when it leaves the workspace."""
        real = Path(os.path.realpath(self.lexical(path)))
        if not self.contains(real):
            raise ToolFailure("path is outside the workspace")
        return real


def run_tool(
    name: str,
    args: Mapping[str, Any],
    *,
    workspace: Workspace,
    env: Mapping[str, str],
    timeout: float,
) -> ToolResult:
    tool: Callable[[Mapping[str, Any], Workspace, Mapping[str, str], float], ToolResult] | None
    tool = _TOOLS.get(name)
    if tool is None:
        return ToolResult(False, "", f"unknown tool {name!r}")
    try:
        return tool(args, workspace, env, timeout)
    except ToolFailure as exc:
        subject = args.get("path") if isinstance(args.get("path"), str) else None
        prefix = f"{name}: {subject}: " if subject else f"{name}: "
        return ToolResult(False, "", prefix + str(exc))
    except OSError as exc:
        subject = args.get("path")
        return ToolResult(False, "", f"{name}: {subject}: {exc.strerror or exc}")


def _string(args: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise ToolFailure(f'argument "{key}" must be a string')
    return value


def code_execution(
    args: Mapping[str, Any], workspace: Workspace, env: Mapping[str, str], timeout: float
) -> ToolResult:
    code = _string(args, "code")
    language = _string(args, "language", "bash")
    program = LANGUAGES.get(language)
    if program is None:
        raise ToolFailure(f'unsupported language {language!r} (use "bash" or "python")')
    result = run_process(
        [program, "-c", code],
        stdin=b"",
        cwd=str(workspace.root),
        env={**env, "PWD": str(workspace.root)},
        timeout=timeout,
    )
    if result.spawn_error is not None:
        return ToolResult(False, "", f"code_execution: cannot run {program}: {result.spawn_error}")
    output = result.stdout.decode("utf-8", errors="replace")
    if result.stdout_truncated:
        output += f"\n[output truncated at {OUTPUT_CAP} bytes]"
    stderr = result.stderr.decode("utf-8", errors="replace")
    if result.stderr_truncated:
        stderr += f"\n[stderr truncated at {OUTPUT_CAP} bytes]"
    if result.timed_out:
        failure = f"timed out after {timeout:g} s"
        return ToolResult(False, output, failure + (f"\n{stderr}" if stderr else ""))
    if result.returncode != 0:
        return ToolResult(False, output, stderr or _exit_text(result.returncode))
    return ToolResult(True, output, stderr or None)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "did not terminate"
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


def read_file(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    path = workspace.resolve(_string(args, "path"))
    with open(path, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ToolFailure("not a regular file")
        data = handle.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise ToolFailure(f"file is larger than {MAX_READ_BYTES} bytes")
    try:
        return ToolResult(True, data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ToolFailure("file is not UTF-8 text") from None


def write_file(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    content = _string(args, "content")
    path = workspace.resolve(_string(args, "path"))
    if path == workspace.root:
        raise ToolFailure("is a directory")
    _make_parents(path.parent, workspace)
    data = content.encode("utf-8", errors="surrogatepass")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return ToolResult(True, f"wrote {len(data)} bytes to {args['path']}")


def _make_parents(directory: Path, workspace: Workspace) -> None:
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for each in reversed(missing):
        os.mkdir(each)
        if not workspace.contains(Path(os.path.realpath(each))):  # raced by a symlink
            raise ToolFailure("path is outside the workspace")


def list_files(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    path = workspace.resolve(_string(args, "path", "."))
    entries = []
    with os.scandir(path) as listing:
        for entry in listing:
            entries.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return ToolResult(True, "\n".join(sorted(entries)))


def delete_file(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    given = _string(args, "path")
    # Refuses a path whose directories, or whose final symlink, lead outside.
    if workspace.resolve(given) == workspace.root:
        raise ToolFailure("is a directory")
    lexical = workspace.lexical(given)
    if lexical.name in ("", ".", ".."):
        raise ToolFailure("is a directory")
    parent = Path(os.path.realpath(lexical.parent))
    if not workspace.contains(parent):
        raise ToolFailure("path is outside the workspace")
    target = parent / lexical.name  # the link itself when the final component is a symlink
    if stat.S_ISDIR(os.lstat(target).st_mode):
        raise ToolFailure("is a directory")
    os.unlink(target)
    return ToolResult(True, f"deleted {given}")


_TOOLS: dict[str, Callable[[Mapping[str, Any], Workspace, Mapping[str, str], float], ToolResult]]
_TOOLS = {
    "code_execution": code_execution,
    "read_file": read_file,
    "write_file": write_file,
    "list_files": list_files,
    "delete_file": delete_file,
}
