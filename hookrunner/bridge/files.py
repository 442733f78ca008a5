"""Claude Code's own file tools kept away from the bridge's admin token (issue 47, D505).

Bash runs under the boundary, where the token file is masked; Claude Code's Read, Edit,
Write, MultiEdit, NotebookEdit, Grep and Glob run in Claude Code's process, outside it,
so the bridge refuses them the token: a path that is the token file (Read, Edit, ...) or
a directory holding it (Grep, Glob: they read or list below their path, the working
directory when none is given).

``writes_outside``: those of them that write (Write, Edit, MultiEdit, NotebookEdit) may
not change what runs outside the boundary, where the token file is not masked (D541): a
``.claude`` folder anywhere (settings and their hooks, agents, commands), ``.mcp.json``,
a repository's git configuration and hooks and the user's (D543), Claude Code's
configuration folder, the shell files its snapshot is taken from, and the runner's own
installation. The boundary keeps Bash from them (``enforce.keep``, D435);
Claude Code's file tools run beside it.

Invariants: pure but for ``realpath``; a path that cannot be read as one is judged as
the working directory (the wider reading: refuse rather than let through).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from sandbox_egress.hookrunner.enforce.keep import (
    GIT_FILES,
    HOME_GIT_FILES,
    SHELL_FILES,
    claude_config,
    runner_install,
)

FILE_KEYS = ("file_path", "notebook_path", "path")
SEARCH_TOOLS = frozenset({"Grep", "Glob", "LS"})
FILE_TOOLS = frozenset({"Read", "Edit", "Write", "MultiEdit", "NotebookEdit"}) | SEARCH_TOOLS
WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
RUN_OUTSIDE = (".claude", ".mcp.json")  # a path component Claude Code starts things from


def touches(tool: str, tool_input: Mapping[str, Any], protected: str, cwd: str) -> bool:
    """Whether this file-tool call would read, list or change ``protected``."""
    if tool not in FILE_TOOLS:
        return False
    path = _path(tool_input, cwd)
    if path == protected:
        return True
    return tool in SEARCH_TOOLS and (path == "/" or protected.startswith(path.rstrip("/") + "/"))


def writes_outside(
    tool: str, tool_input: Mapping[str, Any], cwd: str, env: Mapping[str, str]
) -> bool:
    """Whether this file-tool call would change what runs outside the boundary (D541)."""
    if tool not in WRITE_TOOLS:
        return False
    path = _path(tool_input, cwd)
    parts = path.split("/")
    if any(part in RUN_OUTSIDE for part in parts):
        return True
    if any(a == ".git" and b in GIT_FILES for a, b in zip(parts, parts[1:], strict=False)):
        return True  # what git runs commands from, in any repository (D543)
    home = env.get("HOME", "")
    names = (*SHELL_FILES, ".claude.json", *HOME_GIT_FILES)
    kept = [os.path.join(home, name) for name in names] if home else []
    config = claude_config(env)
    kept += [config] if config else []
    xdg = env.get("XDG_CONFIG_HOME", "")
    kept += [os.path.join(xdg, "git")] if xdg else []
    kept += runner_install()
    here = os.path.realpath(cwd)
    real = [os.path.realpath(k) for k in kept if os.path.isabs(k)]
    # What holds the working directory is never refused whole (as ``keep._pruned``).
    return any(_inside(path, k) for k in real if not _inside(here, k))


def _path(tool_input: Mapping[str, Any], cwd: str) -> str:
    given = next((tool_input[k] for k in FILE_KEYS if isinstance(tool_input.get(k), str)), "")
    return os.path.realpath(os.path.join(cwd, given) if given else cwd)


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")
