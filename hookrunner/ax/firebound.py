"""The boundary comes along where Claude Code runs the tool itself (``fire``, issue 44, D380).

For a Bash PreToolUse call that the hooks allow, the runner as Claude Code's hook
(``fire --claude-exit-codes``) answers ``allow`` with ``updatedInput``: the same
tool input, its ``command`` replaced by ``enforce.bound.shell_command`` (the command
run under the runner's boundary: masks and git guard, same directory, environment,
output, exit status and background runs). The packs are told what stands below
(``HOOK_BOUNDARY``, D194/D196), so they refuse only what they see.

Where no boundary can be made (``boundary_here`` is empty) nothing is rewritten,
the packs are told nothing and refuse what they cannot read, and the first call of
a session says so (``first_notice``), as ``claude install`` does.

Invariants: only ``Bash`` is rewritten (the other tools are Claude Code's own file
tools, judged by the packs alone); a user hook's ``updatedInput`` is kept and its
command is the one wrapped; an ``ask`` stays an ``ask``; a deny carries no input.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.ax.events import EventInput
from sandbox_egress.hookrunner.ax.model import AxEvent
from sandbox_egress.hookrunner.bridge.answer import unwrapped as without_grants
from sandbox_egress.hookrunner.enforce.bound import original, shell_command
from sandbox_egress.hookrunner.enforce.toolns import _SYSTEM_PATH as SYSTEM_PATH
from sandbox_egress.hookrunner.enforce.toolns import boundary_problem, guard_python, programs

SHELL_TOOLS = frozenset({"Bash"})  # Claude Code's tool that runs shell text


def boundary_here(env: Mapping[str, str]) -> str:
    """``HOOK_BOUNDARY`` for a Bash call this runner will wrap: ``git,mask``, ``mask``
    (no git to guard), or empty when no namespace can be made. Makes nothing (the guard's
    directory is made by ``enforce.bound``, per command)."""
    if programs() is None:
        return ""
    git = shutil.which("git", path=env.get("PATH") or SYSTEM_PATH)  # as toolns.git_paths
    return "git,mask" if git is not None and guard_python() is not None else "mask"


def wraps(inp: EventInput) -> bool:
    """Whether this call's command is the kind the boundary wraps (a Bash PreToolUse)."""
    command = inp.claude_input.get("command")
    return (
        inp.event is AxEvent.PRE_TOOL_USE
        and inp.claude_tool in SHELL_TOOLS
        and isinstance(command, str)
    )


_AFTER = frozenset({AxEvent.POST_TOOL_USE, AxEvent.POST_TOOL_USE_FAILURE})


def unwrapped(inp: EventInput) -> EventInput:
    """A PostToolUse(Failure) of a Bash call this runner wrapped, as the hooks must see it:
    with the command the agent wrote (Claude Code reports the ``updatedInput`` it ran), so
    a user's logger or ``require-tests-on-stop`` reads ``pytest``, not the wrapping."""
    if inp.event not in _AFTER or inp.claude_tool not in SHELL_TOOLS:
        return inp
    command = inp.claude_input.get("command")
    text = original(without_grants(command)) if isinstance(command, str) else None
    if text is None:
        return inp
    claude_input = {**inp.claude_input, "command": text}
    args = {**inp.args, "command": text} if inp.args.get("command") == command else inp.args
    return replace(inp, claude_input=claude_input, args=args)


def mask_root(workspace: Path, env: Mapping[str, str]) -> Path:
    """The tree whose ``.env`` files are masked: Claude Code's project directory (it gives
    its hooks ``CLAUDE_PROJECT_DIR``), else the runner's workspace; a hook started in a
    directory the agent ``cd``'d into must not mask only that one."""
    given = env.get("CLAUDE_PROJECT_DIR", "")
    if given and os.path.isabs(given) and os.path.isdir(given):
        return Path(os.path.realpath(given))
    return workspace


def bounded_answer(
    answer: Mapping[str, Any] | None,
    tool_input: Mapping[str, Any],
    workspace: Path,
    masks: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Claude Code's answer with ``updatedInput`` carrying the command under the boundary.

    ``answer`` is what the runner would say otherwise (``claudeout.claude_answer``); a
    ``hookSpecificOutput.updatedInput`` already in it (a user hook's) is the input wrapped.
    """
    result = dict(answer or {})
    specific = dict(result.get("hookSpecificOutput") or {})
    given = specific.get("updatedInput")
    base = dict(given) if isinstance(given, Mapping) else dict(tool_input)
    command = base.get("command")
    if not isinstance(command, str):
        return result
    base["command"] = shell_command(command, workspace, masks=masks)
    specific["hookEventName"] = "PreToolUse"
    if specific.get("permissionDecision") not in ("ask", "deny"):
        specific["permissionDecision"] = "allow"
    if specific.get("permissionDecision") != "deny":
        specific["updatedInput"] = base
    result["hookSpecificOutput"] = specific
    return result


def notice() -> str | None:
    """What ``claude install`` and a session's first call say when no boundary can be made."""
    problem = boundary_problem()
    return None if problem is None else f"no boundary for Claude Code's Bash tool: {problem}"


def first_notice(session_id: str) -> str | None:
    """``notice()`` the first time a session asks (a marker per session in a directory
    private to this user); None afterwards, or when there is a boundary."""
    problem = notice()
    if problem is None:
        return None
    said = f"hookrunner: {problem}"
    directory = Path(tempfile.gettempdir()) / f"hookrunner-{os.getuid()}"
    with contextlib.suppress(FileExistsError, OSError):
        directory.mkdir(mode=0o700)
    digest = hashlib.sha256(session_id.encode("utf-8", errors="replace")).hexdigest()[:24]
    marker = directory / f"boundary-said-{digest}"
    try:
        info = os.lstat(directory)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return said  # not ours alone: say it every time rather than trust a marker
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        return None
    except OSError:
        return said
    return said
