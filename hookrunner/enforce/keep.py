"""What a command under the ``fire`` boundary may not change: what runs outside it next.

Claude Code runs each Bash call as ``source SNAPSHOT && eval WRAPPED`` in a shell of its
own, and the wrapping starts the runner's interpreter (``enforce.bound``) before any
namespace exists. So whatever the caller's shell or that interpreter reads before the
boundary is made is part of the boundary: a command that could rewrite it would make the
next call run unbounded (a function named ``exec`` in the shell snapshot, or a ``bound.py``
of its own in the runner's installation); so is what Claude Code runs at its next start
(the project's ``.claude/settings.json`` hooks, the runner's own entry among them when
installed with ``--scope project``, and ``.mcp.json`` servers). The same user runs both
(a root Claude Code's commands keep uid 0 without capability and still own root's
files), so file permissions do not stop it; a read-only bind in the command's mount
namespace does (D435).

Invariants: only paths that exist are listed (a bind needs its target); each once, no
path listed below another one listed; the workspace itself and what holds it are never
made read-only (the agent's work must stay writable); a runner installed inside the
workspace is (its ``.venv`` is read-only for the agent's commands).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# The project's files Claude Code runs or starts things from at its next start: its hooks
# (and the runner itself, installed with ``--scope project``) and its MCP servers.
PROJECT_FILES = (".claude", ".mcp.json")
# Read by the login shell Claude Code takes its snapshot from, at the next session start;
# and Claude Code's own state file in $HOME (the user's MCP servers, started at its start).
SHELL_FILES = (
    ".claude.json",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".bash_logout",
    ".zshenv",
    ".zprofile",
    ".zshrc",
    ".zlogin",
)


# What git runs commands from (core.fsmonitor, core.hooksPath, aliases, hooks), run by
# whoever runs git in the workspace next, outside the boundary: Claude Code at its start,
# the user, an editor. Kept from a bounded command while the approvals bridge is on (D543).
GIT_FILES = ("config", "config.worktree", "hooks", "modules")
HOME_GIT_FILES = (".gitconfig", ".config/git")


def claude_config(env: Mapping[str, str]) -> str | None:
    """Claude Code's configuration directory (shell snapshots, settings, hooks)."""
    given = env.get("CLAUDE_CONFIG_DIR", "")
    if given and os.path.isabs(given):
        return given
    home = env.get("HOME", "")
    return os.path.join(home, ".claude") if home and os.path.isabs(home) else None


def runner_install() -> list[str]:
    """The runner's interpreter prefix and every directory its package is read from (an
    editable install's package links to the clone's folders), their common parent first:
    one mount when it does not hold the workspace (``_pruned`` drops what is below it)."""
    found = [sys.prefix, str(Path(__file__).resolve().parent.parent)]
    top = sys.modules.get("sandbox_egress")
    if top is not None and top.__file__:
        here = Path(top.__file__).parent
        found.append(str(here))
        found += [str(child) for child in here.iterdir() if child.is_dir()]
    real = [os.path.realpath(path) for path in found]
    return [os.path.commonpath(real), *real]


def prepare(
    env: Mapping[str, str], workspace: Path, git: bool = False
) -> tuple[str | None, list[str]]:
    """The real paths to make read-only for a command under the boundary (see module doc;
    ``git``: git's configuration and hooks too, the approvals bridge is on, D543), or a
    reason to refuse the call. First it makes the folders whose absence and emptiness mean
    the same to Claude Code (the project's ``.claude``, its configuration folder), so that
    they are kept like existing ones (D650). The reason: a kept name, or a folder holding
    one, is a link to nothing (a bind needs its target: the command could make the target
    and write through the link, D651)."""
    for folder in (str(workspace / ".claude"), claude_config(env)):
        if folder is not None and not os.path.lexists(folder):
            with contextlib.suppress(OSError):  # then the command cannot make it either
                os.mkdir(folder)
    candidates = _candidates(env, workspace, git)
    for path in candidates:
        dangling = _dangling(path)
        if dangling is not None:
            return f"{dangling} is a link to nothing, which the boundary cannot keep read-only", []
    return None, _pruned(candidates, os.path.realpath(workspace))


def _dangling(path: str) -> str | None:
    """``path`` or the nearest folder holding it, when that is a link to nothing."""
    while not os.path.exists(path):
        if os.path.lexists(path):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return None


def _candidates(env: Mapping[str, str], workspace: Path, git: bool) -> list[str]:
    home = env.get("HOME", "")
    candidates: list[str] = list(runner_install())
    config = claude_config(env)
    if config is not None:
        candidates.append(config)
    if home and os.path.isabs(home):
        candidates += [os.path.join(home, name) for name in SHELL_FILES]
        if git:
            candidates += [os.path.join(home, name) for name in HOME_GIT_FILES]
    xdg = env.get("XDG_CONFIG_HOME", "")
    if git and xdg and os.path.isabs(xdg):
        candidates.append(os.path.join(xdg, "git"))
    candidates += [str(workspace / name) for name in PROJECT_FILES]
    if git:
        candidates += [str(workspace / ".git" / name) for name in GIT_FILES]
    return candidates


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _pruned(candidates: Iterable[str], workspace: str) -> list[str]:
    real = sorted({os.path.realpath(p) for p in candidates if os.path.exists(p)})
    kept: list[str] = []
    for path in real:
        if _inside(workspace, path) or any(_inside(path, k) for k in kept):
            continue  # would freeze the workspace, or is already read-only
        kept.append(path)
    return kept
