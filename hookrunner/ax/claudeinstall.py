"""``hookrunner claude install|uninstall``: wire the runner as Claude Code's hook command in
one step, keeping the user's own hooks running with their Claude Code semantics (D229).

Claude Code runs the hooks of its settings files itself, and the runner as its hook reads
none of them (the recursion guard, D130), so wiring the runner used to mean translating
every hook by hand. ``install`` instead:
* moves the ``hooks`` of every event the runner fires out of the settings file into a
  runner-owned file (the same settings format) under the user's ``~/.claude``, which the
  runner reads with ``fire --claude-hooks`` at the user's level: each hook still runs,
  once, with Claude Code's exit codes and JSON. User scope: ``hookrunner-hooks.json``
  beside the settings file; project scope: ``hookrunner-projects/<name>-<hash>.json``,
  never in the workspace, which the agent can write and which the runner refuses to read
  hooks from (D191, D240);
* writes, for each of those events, one entry whose command is the runner
  (``fire EVENT --claude-json --claude-hooks FILE``, plus ``--ax-config`` when given),
  reached through the quick client (``quickbuild``: compiled C, else Python); on an
  event that can block, the command fails closed: any exit but 0 and 2 (the runner or
  its installation gone: 127) becomes 2 with a reason (D395);
* names, before it changes anything, each hook it cannot carry with Claude Code's
  semantics (``claudecarry``, D393) and exits 1; with ``force`` those stay in the
  settings file, where Claude Code keeps running them;
* leaves everything else as it was: other keys, and the hooks of events the runner does
  not fire (``Notification``, ``PermissionRequest``...), which Claude Code keeps running
  itself.

Invariants: installing twice changes nothing; the first install keeps a copy of the
original file (``settings.json.hookrunner-backup``); ``uninstall`` puts the moved hooks
back and removes the runner's entries; files are replaced atomically, with their mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.ax.claudecarry import split_group
from sandbox_egress.hookrunner.errors import UsageError

# Claude Code's hook events that the runner fires (``AxEvent``), in Claude Code's names.
CLAUDE_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
)
MOVED_NAME = "hookrunner-hooks.json"
PROJECTS_DIR = "hookrunner-projects"
BACKUP_SUFFIX = ".hookrunner-backup"
BLOCKING = ("PreToolUse", "UserPromptSubmit")  # an exit 2 of these blocks in Claude Code


class NotCarried(UsageError):
    """Hooks ``install`` cannot carry with Claude Code's semantics; nothing was changed."""

    def __init__(self, settings: Path, found: list[str]) -> None:
        self.lines = [f"{settings} {line}" for line in found]
        super().__init__(f"{len(found)} hook(s) cannot be carried over")


def settings_path(scope: str, home: Path | None, workspace: Path) -> Path:
    """Claude Code's settings file of ``scope`` (``user``: ~/.claude; ``project``: the
    workspace's .claude)."""
    if scope == "project":
        return workspace / ".claude" / "settings.json"
    if home is None:
        raise UsageError("--scope user needs $HOME")
    return home / ".claude" / "settings.json"


def moved_path(scope: str, home: Path | None, workspace: Path) -> Path:
    """Where ``install`` moves the hooks of ``scope``'s settings file: under ``~/.claude``
    in both scopes, one file per workspace for ``project`` (its name, and a hash of its
    real path that keeps two workspaces of one name apart)."""
    if home is None:
        raise UsageError(f"--scope {scope} needs $HOME (the moved hooks live in ~/.claude)")
    if scope == "user":
        return home / ".claude" / MOVED_NAME
    digest = hashlib.sha256(os.fsencode(os.path.realpath(workspace))).hexdigest()[:12]
    return home / ".claude" / PROJECTS_DIR / f"{workspace.name or 'root'}-{digest}.json"


def runner_command(client: list[str], event: str, moved: Path, ax_config: Path | None) -> str:
    """The shell command Claude Code runs (``/bin/sh -c``) for ``event``: ``client`` is the
    runner, or the quick client of a warm one followed by the runner (``ax.quickclient``).
    On an event that can block, any status but 0 and 2 becomes a block (D395)."""
    words = [*client, "fire", event, "--claude-json", "--claude-hooks", str(moved)]
    if ax_config is not None:
        words += ["--ax-config", str(ax_config)]
    command = shlex.join(words)
    if event not in BLOCKING:
        return command
    said = "hookrunner: the hook command failed (exit $s), so this call is blocked"
    return f'{command} || {{ s=$?; [ "$s" -eq 2 ] || echo "{said}" >&2; exit 2; }}'


def _is_runner(group: Any, runner: str) -> bool:
    """An entry ``install`` wrote: its command runs ``RUNNER fire`` (directly or through
    the quick client)."""
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(h, dict) and isinstance(h.get("command"), str) and _runs(h["command"], runner)
        for h in hooks
    )


def _runs(command: str, runner: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return any(w == runner and words[i + 1 : i + 2] == ["fire"] for i, w in enumerate(words))


def installed(
    document: dict[str, Any], moved: dict[str, Any], runner: str, commands: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(the settings document, the moved document, what cannot be carried: one
    "$.hooks.EVENT[i]...: why" each) once installed; what cannot be carried stays in
    the settings document, after the runner's entry. Pure."""
    hooks = document.get("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError("the settings file's `hooks` is not an object: fix it first")
    kept = dict(moved.get("hooks", {}))
    result: dict[str, Any] = {}
    staying: dict[str, list[Any]] = {}
    found: list[str] = []
    for event, groups in hooks.items():
        if event not in CLAUDE_EVENTS:
            result[event] = groups  # Claude Code still runs these itself
            continue
        for index, group in enumerate(groups if isinstance(groups, list) else []):
            if _is_runner(group, runner):
                continue
            moving, stays, problems = split_group(event, group)
            found += [f"$.hooks.{event}[{index}]{where}: {why}" for where, why in problems]
            if moving is not None:
                kept[event] = [*kept.get(event, []), moving]
            if stays is not None:
                staying.setdefault(event, []).append(stays)
    for event in CLAUDE_EVENTS:
        result[event] = [
            {"matcher": "", "hooks": [{"type": "command", "command": commands[event]}]}
            for _ in (event,)
            if event in commands
        ]
        result[event] += staying.get(event, [])
        if not result[event]:
            del result[event]
    return {**document, "hooks": result}, {"hooks": kept}, found


def left_to_claude_code(document: dict[str, Any]) -> list[str]:
    """The events with hooks that Claude Code keeps running itself (not fired here)."""
    hooks = document.get("hooks", {})
    return [e for e in hooks if e not in CLAUDE_EVENTS] if isinstance(hooks, dict) else []


def uninstalled(document: dict[str, Any], moved: dict[str, Any], runner: str) -> dict[str, Any]:
    """The settings document with the runner's entries removed and the moved hooks back."""
    hooks = document.get("hooks", {})
    result: dict[str, Any] = {}
    for event, groups in (hooks if isinstance(hooks, dict) else {}).items():
        own = (
            [g for g in groups if not _is_runner(g, runner)] if isinstance(groups, list) else groups
        )
        if own:
            result[event] = own
    for event, groups in moved.get("hooks", {}).items():
        result[event] = [*result.get(event, []), *groups]
    return (
        {**document, "hooks": result}
        if result
        else {k: v for k, v in document.items() if k != "hooks"}
    )


def read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not readable as JSON ({exc}); nothing was changed") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path}: a settings file must be a JSON object; nothing was changed")
    return document


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Replace ``path`` atomically, keeping its mode (0600 for a new file, 0700 for a new
    directory)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(json.dumps(document, indent=2) + "\n")
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def install(
    settings: Path,
    runner: str,
    ax_config: Path | None,
    client: list[str] | None = None,
    moved_to: Path | None = None,
    *,
    force: bool = False,
) -> Path:
    """Install into ``settings``; the moved hooks' file is returned. ``client``: what
    Claude Code runs, ending with ``runner`` (default: the runner alone); ``moved_to``:
    where the hooks move (default: beside ``settings``, the user scope's place).
    ``NotCarried`` (nothing changed) when a hook cannot be carried and not ``force``."""
    moved_path = moved_to or settings.parent / MOVED_NAME
    if (legacy := _legacy(settings, moved_path)) is not None:
        raise UsageError(
            f"{legacy}: hooks an earlier install moved into the workspace, where the runner "
            "does not read them; run `hookrunner claude uninstall` first, then install"
        )
    document, moved = read_json(settings), read_json(moved_path)
    words = client or [runner]
    commands = {e: runner_command(words, e, moved_path, ax_config) for e in CLAUDE_EVENTS}
    new_document, new_moved, found = installed(document, moved, runner, commands)
    if found and not force:
        raise NotCarried(settings, found)
    backup = settings.with_name(settings.name + BACKUP_SUFFIX)
    if settings.exists() and not backup.exists():
        write_json(backup, document)
    write_json(moved_path, new_moved)  # first: the hooks are never in neither file
    write_json(settings, new_document)
    return moved_path


def uninstall(settings: Path, runner: str, moved_to: Path | None = None) -> None:
    """Put the moved hooks back (also those an install before D240 left beside a
    project's settings file) and remove the runner's entries."""
    moved_path = moved_to or settings.parent / MOVED_NAME
    legacy = _legacy(settings, moved_path)
    document, moved = read_json(settings), read_json(moved_path)
    if legacy is not None:
        document = uninstalled(document, read_json(legacy), runner)
    write_json(settings, uninstalled(document, moved, runner))
    for path in (moved_path, legacy):
        if path is not None and path.exists():
            path.unlink()


def _legacy(settings: Path, moved_path: Path) -> Path | None:
    """The moved hooks' file an install before D240 left beside the settings file, when
    the hooks now move elsewhere (project scope)."""
    beside = settings.parent / MOVED_NAME
    return beside if beside != moved_path and beside.exists() else None
