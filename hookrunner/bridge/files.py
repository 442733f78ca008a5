"""Claude Code's own file tools kept away from the bridge's admin token (issue 47, D505).

Bash runs under the boundary, where the token file is masked; Claude Code's Read, Edit,
Write, MultiEdit, NotebookEdit, Grep and Glob run in Claude Code's process, outside it,
so the bridge refuses them the token: a path that is the token file (Read, Edit, ...) or
a directory holding it (Grep, Glob: they read or list below their path, the working
directory when none is given).

Invariants: pure but for ``realpath``; a path that cannot be read as one is judged as
the working directory (the wider reading: refuse rather than let through).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

FILE_KEYS = ("file_path", "notebook_path", "path")
SEARCH_TOOLS = frozenset({"Grep", "Glob", "LS"})
FILE_TOOLS = frozenset({"Read", "Edit", "Write", "MultiEdit", "NotebookEdit"}) | SEARCH_TOOLS


def touches(tool: str, tool_input: Mapping[str, Any], protected: str, cwd: str) -> bool:
    """Whether this file-tool call would read, list or change ``protected``."""
    if tool not in FILE_TOOLS:
        return False
    given = next((tool_input[k] for k in FILE_KEYS if isinstance(tool_input.get(k), str)), "")
    path = os.path.realpath(os.path.join(cwd, given) if given else cwd)
    if path == protected:
        return True
    return tool in SEARCH_TOOLS and (path == "/" or protected.startswith(path.rstrip("/") + "/"))
