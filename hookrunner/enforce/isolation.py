"""Keeping the agent's tools from preparing the environment the operator's hooks run in.

Three things, each applied where the environment or the process is set up:

* ``hook_environment``: what a command hook gets on top of the sanitised
  environment (``envsan``). ``HOME`` and the XDG base directories are kept
  only when they are **runner-owned** (``runner_owned``: outside the
  workspace, owned by the runner's user or root, not writable by group or
  others, and no ancestor writable by others unless sticky); otherwise
  ``HOME`` becomes the hook home and the XDG variable is dropped (so it
  defaults under that home). ``PYTHONNOUSERSITE=1`` is set and more
  interpreter-injection variables are removed. ``PATH`` and the other
  path-valued variables are filtered to runner-owned entries by ``programs``.
* ``tool_user``: the uid/gid the tools' processes run as. When the runner is
  root the default is ``nobody``, so code the agent runs cannot signal,
  ptrace or read the hooks (root's processes) or the runner.
* ``make_undumpable``: ``prctl(PR_SET_DUMPABLE, 0)`` on the runner, so
  ``/proc/<runner>/environ`` and ``mem`` are closed to processes of the same
  uid that lack ``CAP_SYS_PTRACE`` (root keeps it: that is what the tool user
  is for).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.enforce.contain import Credentials
from sandbox_egress.hookrunner.errors import UsageError

TOOL_USER_VARIABLE = "HOOKRUNNER_TOOL_USER"
HOOK_HOME_VARIABLE = "HOOKRUNNER_HOOK_HOME"
DEFAULT_TOOL_USER = "nobody"
XDG_DIRECTORIES = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
# Beyond envsan's list: variables that make an interpreter load code or bytecode from elsewhere.
MORE_INJECTION = frozenset(
    {
        "PYTHONUSERBASE",
        "PYTHONPYCACHEPREFIX",
        "PYTHONWARNINGS",  # a warning category names a module, which is imported
        "PYTHONEXECUTABLE",
        "PYTHONPLATLIBDIR",
        "PERL5DB",
        "PERLDB_OPTS",
        "RUBYSHELL",
        "NODE_REPL_EXTERNAL_MODULE",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
    }
)
_PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process (Linux); whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _inside(path: Path, workspace: Path) -> bool:
    return path == workspace or workspace in path.parents


def runner_owned(directory: str, workspace: Path) -> bool:
    """Whether only the runner's user (or root) can change what is in ``directory``.

    A directory that does not exist yet is judged by its nearest existing ancestor.
    """
    if not directory or not os.path.isabs(directory):
        return False
    real = Path(os.path.realpath(directory))
    if _inside(real, workspace):
        return False
    while not real.exists() and real != real.parent:
        real = real.parent  # a directory yet to be made: its parent decides who could make it
    owners = {0, os.geteuid()}
    for index, each in enumerate((real, *real.parents)):
        try:
            info = os.stat(each)
        except OSError:
            return False
        if index == 0 and not stat.S_ISDIR(info.st_mode):
            return False
        if info.st_uid not in owners:
            return False
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (index == 0 or not info.st_mode & stat.S_ISVTX):
            return False
    return True


def untrusted_descriptor(fd: int, name: Path, workspace: Path) -> str | None:
    """Why the file open on ``fd`` (reached by ``name``, a user-level settings file) could
    have been written by someone else, or None (D191, D386).

    Judged on what was opened, not on a second lookup of the name: the descriptor's file
    (``fstat``) must be a regular file owned by the runner's user or root and not writable
    by group or others; the directory the kernel says it is in, and the directory holding
    ``name`` (where a link to it could be swapped), must be ``runner_owned``."""
    info = os.fstat(fd)
    owners = {0, os.geteuid()}
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid not in owners:
        return f"is owned by uid {info.st_uid}, not by the runner's user or root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        opened = Path(os.path.realpath(name))  # no /proc: the name resolved once more
    holder = Path(os.path.realpath(name.parent))
    for directory in dict.fromkeys((holder, opened.parent)):
        if not runner_owned(str(directory), workspace):
            return (
                f"is in {directory}, which someone other than the runner's user or root can change"
            )
    return None


def hook_home(environ: Mapping[str, str], workspace: Path) -> str:
    """The HOME for hooks: the operator's, when runner-owned; else a runner-owned directory."""
    for candidate in (environ.get(HOOK_HOME_VARIABLE, ""), environ.get("HOME", "")):
        if runner_owned(candidate, workspace):
            return os.path.realpath(candidate)
    default = Path(tempfile.gettempdir()) / f"hookrunner-home-{os.geteuid()}"
    with contextlib.suppress(FileExistsError, OSError):
        default.mkdir(mode=0o700)
    if not default.is_symlink() and runner_owned(str(default), workspace):
        return str(default)
    return tempfile.mkdtemp(prefix="hookrunner-home-")  # someone else made the default


def hook_environment(
    base_env: Mapping[str, str], environ: Mapping[str, str], workspace: Path
) -> dict[str, str]:
    """The sanitised base for command hooks, made safe from what the tools can write."""
    env = {k: v for k, v in base_env.items() if k.upper() not in MORE_INJECTION}
    env["HOME"] = hook_home(environ, workspace)
    for name in XDG_DIRECTORIES:
        if name in env and not runner_owned(env[name], workspace):
            del env[name]
    env["PYTHONNOUSERSITE"] = "1"
    return env


def tool_user(spec: str | None, environ: Mapping[str, str]) -> Credentials | None:
    """Who the tools run as: ``spec``, else HOOKRUNNER_TOOL_USER, else nobody when root.

    ``None`` means the runner's own user (no switch). A name or a number; the
    runner's own user (``root`` for root) means no switch.
    """
    if spec is None:
        spec = environ.get(TOOL_USER_VARIABLE) or None
    if spec is None:
        if os.geteuid() != 0:
            return None
        spec = DEFAULT_TOOL_USER
    try:
        entry = pwd.getpwuid(int(spec)) if spec.isdigit() else pwd.getpwnam(spec)
    except (KeyError, ValueError):
        raise UsageError(f"tool user {spec!r} does not exist") from None
    if entry.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise UsageError(f"tool user {spec!r}: only a runner started as root can switch users")
    return Credentials(entry.pw_uid, entry.pw_gid, entry.pw_name)


def workspace_write_problem(workspace: Path, user: Credentials | None) -> str | None:
    """Why the tool user cannot write the workspace (every write of the agent's code would
    fail with a bare ``Permission denied``), naming the fix; None when it can.

    Judged from the mode bits as the tools run: the tool user's uid and its one gid (no
    supplementary groups); ``None`` is the runner's own user.
    """
    try:
        info = os.stat(workspace)
    except OSError as exc:
        return f"the workspace {str(workspace)!r} cannot be examined: {exc.strerror}"
    if user is None:
        if os.access(workspace, os.W_OK | os.X_OK):
            return None
        uid, gid, name = os.geteuid(), os.getegid(), "the runner's own user"
    else:
        uid, gid, name = user.uid, user.gid, f"the tool user {user.name!r}"
        if uid == 0:
            return None
        if info.st_uid == uid:
            bits = stat.S_IWUSR | stat.S_IXUSR
        elif info.st_gid == gid:
            bits = stat.S_IWGRP | stat.S_IXGRP
        else:
            bits = stat.S_IWOTH | stat.S_IXOTH
        if info.st_mode & bits == bits:
            return None
    owner = _name(pwd.getpwuid, info.st_uid)
    return (
        f"{name} (uid {uid}) cannot write the workspace {str(workspace)!r} (owned by {owner}, "
        f"mode {stat.S_IMODE(info.st_mode):04o}): code_execution and write_file will fail with "
        f"'Permission denied'. Fix: make it writable by that user (chown -R {uid}:{gid} "
        f"{str(workspace)!r}), or run the tools as its owner (--tool-user / {TOOL_USER_VARIABLE})"
    )


def _name(lookup: Any, number: int) -> str:
    try:
        return f"{lookup(number)[0]} (uid {number})"
    except KeyError:
        return f"uid {number}"
