"""The built-in tools that ``hookrunner exec`` runs between the hooks.

Invariants (docs/hooks.md#command-line):
* every path (absolute, relative to the workspace, or reached through
  symlinks) must stay inside the workspace after resolving symlinks; one that
  leaves it is a failed operation, nothing is touched;
* the resolved path is then opened from a descriptor of the workspace without
  following any symlink (``beneath``): a symlink flipped in by a concurrent
  process fails the operation, it never leads outside; reads, writes, listing
  and deletion work on descriptors (``fstat``, ``unlinkat``, ``mkdirat``);
* only regular files are read or written; opens never block (a FIFO fails);
* ``read_file`` and ``write_file`` refuse a file the mask covers (``mask``: checked
  on the opened descriptor, so a link or a hard link to it is refused too), and a
  walk for the masks that cannot finish refuses them (D384);
* ``write_file`` and ``delete_file`` refuse anything under ``.agents/``,
  ``.ax-code/`` and ``.claude/`` (compared ignoring case, after resolving),
  where the repository's hook and settings files live;
* ``code_execution`` runs ``bash -c CODE`` or ``python3 -c CODE`` in the
  workspace with the sanitised environment, an empty stdin, the same process
  group and cgroup discipline and output cap as command hooks, and a deadline,
  as the tool user when there is one (``isolation.tool_user``), with the
  workspace's ``.env`` files masked and git guarded when the runner is root
  (``toolns``); a walk for the masks that cannot finish refuses the call; files
  and directories the file tools create belong to that user too;
* a tool never raises for what the agent asked: bad arguments, missing files
  and failing code all come back as a ``ToolResult`` with ``ok=False`` and the
  failure text in ``error``; ``error`` also carries stderr of code that exited 0.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.enforce.beneath import RaceError, open_beneath, open_directory
from sandbox_egress.hookrunner.enforce.command import OUTPUT_CAP, run_process
from sandbox_egress.hookrunner.enforce.contain import Credentials
from sandbox_egress.hookrunner.enforce.mask import MaskIncomplete, masked_inodes, protected_files
from sandbox_egress.hookrunner.enforce.toolns import tool_namespace

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


PROTECTED_DIRECTORIES = (".agents", ".ax-code", ".claude")  # the repository's hook files (D192)


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

    def parts(self, real: Path) -> tuple[str, ...]:
        """The components of a resolved path below the root (``()`` for the root)."""
        return real.relative_to(self.root).parts

    def open_root(self) -> int:
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def refuse_protected(self, parts: tuple[str, ...]) -> None:
        """Tools may read the hook directories but never change them (ignoring case)."""
        if parts and parts[0].casefold() in PROTECTED_DIRECTORIES:
            raise ToolFailure(
                f"{parts[0]}/ holds the repository's hooks and is read-only for tools"
            )


Tool = Callable[
    [Mapping[str, Any], Workspace, Mapping[str, str], float, Credentials | None], ToolResult
]


def run_tool(
    name: str,
    args: Mapping[str, Any],
    *,
    workspace: Workspace,
    env: Mapping[str, str],
    timeout: float,
    user: Credentials | None = None,
) -> ToolResult:
    """Run one tool; ``user``: the uid/gid its processes and new files get (runner as root)."""
    tool: Tool | None = _TOOLS.get(name)
    if tool is None:
        return ToolResult(False, "", f"unknown tool {name!r}")
    try:
        return tool(args, workspace, env, timeout, user)
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
    args: Mapping[str, Any],
    workspace: Workspace,
    env: Mapping[str, str],
    timeout: float,
    user: Credentials | None = None,
) -> ToolResult:
    code = _string(args, "code")
    language = _string(args, "language", "bash")
    program = LANGUAGES.get(language)
    if program is None:
        raise ToolFailure(f'unsupported language {language!r} (use "bash" or "python")')
    try:  # .env unreadable (D93), git guarded (D185): in the tool's own mount namespace
        masks = [("/dev/null", path) for path in protected_files(workspace.root)]
    except MaskIncomplete as exc:
        raise ToolFailure(f"refused: the .env files cannot all be masked ({exc})") from None
    argv, user, _ = tool_namespace([program, "-c", code], masks, user, env)
    result = run_process(
        argv,
        stdin=b"",
        cwd=str(workspace.root),
        env={**env, "PWD": str(workspace.root)},
        timeout=timeout,
        user=user,
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


def _regular(fd: int) -> os.stat_result:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if not stat.S_ISREG(info.st_mode):
        raise ToolFailure("not a regular file")
    return info


def _refuse_masked(workspace: Workspace, info: os.stat_result) -> None:
    """The runner's own file tools honour the mask ``code_execution`` gets (D384)."""
    try:
        masked = masked_inodes(workspace.root)
    except MaskIncomplete as exc:
        raise ToolFailure(f"refused: the .env files cannot all be masked ({exc})") from None
    if (info.st_dev, info.st_ino) in masked:
        raise ToolFailure(
            "is masked: .env files hold secrets and are off limits to tools; "
            "ask the user for the values you need"
        )


def _race(exc: RaceError) -> ToolFailure:
    return ToolFailure("a path component changed while it was opened (a symlink appeared); refused")


def read_file(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    parts = workspace.parts(workspace.resolve(_string(args, "path")))
    root = workspace.open_root()
    try:
        fd = open_beneath(root, parts, os.O_RDONLY)
    except RaceError as exc:
        raise _race(exc) from None
    finally:
        os.close(root)
    with os.fdopen(fd, "rb") as handle:
        _refuse_masked(workspace, _regular(fd))
        os.set_blocking(fd, True)
        data = handle.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise ToolFailure(f"file is larger than {MAX_READ_BYTES} bytes")
    try:
        return ToolResult(True, data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ToolFailure("file is not UTF-8 text") from None


def write_file(
    args: Mapping[str, Any], workspace: Workspace, env: Any, timeout: Any, user: Credentials | None
) -> ToolResult:
    content = _string(args, "content")
    parts = workspace.parts(workspace.resolve(_string(args, "path")))
    if not parts:
        raise ToolFailure("is a directory")
    workspace.refuse_protected(parts)
    data = content.encode("utf-8", errors="surrogatepass")
    root = workspace.open_root()
    try:
        parent = open_directory(root, parts[:-1], create=True, owner=user)
        try:
            fd = _open_for_writing(parent, parts[-1], user)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader, a socket
                raise ToolFailure("not a regular file") from None
            raise
        finally:
            os.close(parent)
    except RaceError as exc:
        raise _race(exc) from None
    finally:
        os.close(root)
    with os.fdopen(fd, "wb") as handle:
        info = _regular(fd)
        _refuse_masked(workspace, info)
        if info.st_nlink > 1:
            raise ToolFailure("file has other hard links; not written")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        handle.write(data)
    return ToolResult(True, f"wrote {len(data)} bytes to {args['path']}")


def _open_for_writing(parent: int, name: str, user: Credentials | None) -> int:
    """Open (creating) a file to write; a new file belongs to the tool user, if there is one."""
    try:
        fd = open_beneath(parent, [name], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return open_beneath(parent, [name], os.O_WRONLY)
    if user is not None:
        os.fchown(fd, user.uid, user.gid)
    return fd


def list_files(args: Mapping[str, Any], workspace: Workspace, *_: Any) -> ToolResult:
    parts = workspace.parts(workspace.resolve(_string(args, "path", ".")))
    root = workspace.open_root()
    try:
        fd = open_beneath(root, parts, os.O_RDONLY | os.O_DIRECTORY)
    except RaceError as exc:
        raise _race(exc) from None
    finally:
        os.close(root)
    entries = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                entries.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    finally:
        os.close(fd)
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
    parent_parts = workspace.parts(parent)
    workspace.refuse_protected((*parent_parts, lexical.name))
    root = workspace.open_root()
    try:
        dirfd = open_directory(root, parent_parts)
    except RaceError as exc:
        raise _race(exc) from None
    finally:
        os.close(root)
    try:
        # The link itself when the final component is a symlink; unlinkat never removes a
        # directory (EISDIR), even one swapped in after this check.
        if stat.S_ISDIR(os.stat(lexical.name, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise ToolFailure("is a directory")
        os.unlink(lexical.name, dir_fd=dirfd)
    finally:
        os.close(dirfd)
    return ToolResult(True, f"deleted {given}")


_TOOLS: dict[str, Tool] = {
    "code_execution": code_execution,
    "read_file": read_file,
    "write_file": write_file,
    "list_files": list_files,
    "delete_file": delete_file,
}
