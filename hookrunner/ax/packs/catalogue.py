"""The pack catalogue (runner side): what each pack hooks, and the command line that runs it.

A pack is one or more legacy entries whose command runs this package's
``main`` in a child process, exactly like a custom hook (same process-group
discipline, deadline, sanitised environment, ``HOOK_PACK`` set). The child
runs ``python -I -S`` with only this project's root on ``sys.path``: no
``PYTHONPATH``, no site-packages: the packs import the standard library,
their own modules and the shell grammar (``tree_sitter``, ``tree_sitter_bash``,
whose directory is appended after the standard library; D90). Blocking packs
exit 2 with the reason on stderr and set ``blockOnFailure``, so a pack that
crashes blocks rather than lets a force push or an ``.env`` read through.

Tool ids of both vocabularies are matched: AX Code's (``bash``, ``edit``,
``write``, ``read``...), this runner's (``code_execution``, ``write_file``,
``read_file``...) and Claude Code's (``Bash``, ``Edit``...).
"""

from __future__ import annotations

import functools
import importlib.util
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import sandbox_egress

BASH_TOOLS = ("bash", "code_execution", "Bash")
EDIT_TOOLS = (
    "edit",
    "write",
    "multiedit",
    "patch",
    "apply_patch",
    "write_file",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
)
READ_TOOLS = ("read", "read_file", "grep", "Read", "Grep")
DELETE_TOOLS = ("delete_file",)
# The directory holding the import package sandbox_egress/ (the checkout, or site-packages).
PROJECT_ROOT = Path(sandbox_egress.__file__).resolve().parent.parent


@dataclass(frozen=True)
class PackHook:
    event: str
    tools: tuple[str, ...]  # () matches every event
    block_on_failure: bool
    timeout: int

    @property
    def matcher(self) -> str:
        return "|".join(self.tools)


PACKS: dict[str, tuple[PackHook, ...]] = {
    "format-after-edit": (PackHook("PostToolUse", EDIT_TOOLS, False, 60),),
    "block-force-push": (PackHook("PreToolUse", BASH_TOOLS, True, 10),),
    "require-tests-on-stop": (
        PackHook("PostToolUse", EDIT_TOOLS + DELETE_TOOLS + BASH_TOOLS, False, 10),
        PackHook("Stop", (), False, 10),
    ),
    "protect-env-files": (
        PackHook("PreToolUse", EDIT_TOOLS + READ_TOOLS + DELETE_TOOLS + BASH_TOOLS, True, 10),
    ),
    "log-bash-commands": (PackHook("PreToolUse", BASH_TOOLS, False, 10),),
}


@functools.cache  # where the installed grammar is does not change in a process (D396)
def grammar_paths() -> tuple[str, ...]:
    """The directories holding the shell grammar (tree-sitter, tree-sitter-bash), D90."""
    paths: list[str] = []
    for module in ("tree_sitter", "tree_sitter_bash"):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin is not None:
            directory = str(Path(spec.origin).resolve().parents[1])
            if directory not in paths:
                paths.append(directory)
    return tuple(paths)


def pack_command(name: str, python: str | None = None) -> str:
    """The shell command line of a pack's hooks."""
    bootstrap = (
        f"import sys; sys.path.insert(0, {str(PROJECT_ROOT)!r}); "
        f"sys.path.extend({list(grammar_paths())!r}); "
        "from sandbox_egress.hookrunner.ax.packs.main import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = [python or sys.executable, "-I", "-S", "-c", bootstrap, name]
    return " ".join(shlex.quote(a) for a in argv)
