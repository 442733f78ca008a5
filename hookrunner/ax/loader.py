"""Discovery of AX hooks files, and the trust that lets a repository's file run.

Invariants (docs/hooks.md#the-ax-code--claude-code-dialect-ax-codehooksjson; the source page's
"Activar paquetes"):
* ``<workspace>/.ax-code/hooks.json`` is repository-controlled code, so it is
  loaded only when trusted from outside the repository: the runner's
  environment has ``AX_CODE_TRUST_PROJECT_CONFIG`` exactly ``1``, or the
  runner's own flag (``--trust-project-hooks`` / ``trust_project=True``) says
  so. ``true``, ``yes`` or ``1 `` do not; the notice says why;
* an untrusted project file is not parsed at all; one notice says it is off;
* an operator file named explicitly (``--ax-config``) is trusted (it comes
  from outside the repository) and loads first; a file reached both ways is
  loaded once (device and inode);
* each file is read once, when the session opens; the snapshot is immutable;
* Claude Code's settings files (``SettingsPlaces``: managed, ``~/.claude``, and,
  trusted only, the project's ``.claude/settings.json`` and ``settings.local.json``)
  are read with Claude Code's switches (``_switches``); the managed file's
  ``disableAllHooks`` / ``allowManagedHooksOnly`` also skip ``.ax-code/hooks.json``,
  never the ``--ax-config`` file; none is read by a runner that is a hook
  (``settings_places``: the recursion guard);
* the full environment (``AX_CODE_HOOKS_FULL_ENV=1``, or the kernel's
  ``HOOKRUNNER_FULL_ENV=1``) is read from the runner's environment only, by
  the kernel's one parser (``kernel.env_switch``); nothing in a file can ask for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner import kernel
from sandbox_egress.hookrunner.ax.model import AxConfig, AxEntry
from sandbox_egress.hookrunner.ax.schema import validate_ax_document
from sandbox_egress.hookrunner.ax.settings import Level, SettingsFile, read_settings, url_allowed
from sandbox_egress.hookrunner.enforce.isolation import untrusted_descriptor
from sandbox_egress.hookrunner.kernel import Switch, env_switch
from sandbox_egress.hookrunner.loader import UntrustedFile, load_file
from sandbox_egress.hookrunner.model import Problem

PROJECT_FILE = Path(".ax-code") / "hooks.json"
USER_SETTINGS = Path(".claude") / "settings.json"  # under $HOME
PROJECT_SETTINGS = Path(".claude") / "settings.json"  # under the workspace
LOCAL_SETTINGS = Path(".claude") / "settings.local.json"
_PROJECT_SETTINGS = (PROJECT_SETTINGS, LOCAL_SETTINGS)
MANAGED_SETTINGS = Path("/etc/claude-code/managed-settings.json")
TRUST_VARIABLE = "AX_CODE_TRUST_PROJECT_CONFIG"
FULL_ENV_VARIABLE = "AX_CODE_HOOKS_FULL_ENV"


def trust_switch(environ: Mapping[str, str], flag: bool | None = None) -> Switch:
    """Whether project hooks may run: the runner's flag, else AX_CODE_TRUST_PROJECT_CONFIG=1."""
    return env_switch(environ, flag, (TRUST_VARIABLE,))


def full_env_switch(environ: Mapping[str, str], flag: bool | None = None) -> Switch:
    """The escape hatch: the flag, else AX_CODE_HOOKS_FULL_ENV=1 (or HOOKRUNNER_FULL_ENV=1)."""
    return kernel.full_env_switch(environ, flag, FULL_ENV_VARIABLE)


NESTED_VARIABLE = "HOOK_EVENT"  # set for every hook this runner runs


def settings_places(
    environ: Mapping[str, str], wanted: bool, managed: str | Path | None
) -> tuple[SettingsPlaces | None, str | None]:
    """Where to read Claude Code's settings files, or None; and why they are not read.

    The recursion guard: a runner that is itself a hook of a runner (``HOOK_EVENT`` in its
    environment) reads none, so a settings entry that invokes the runner cannot run itself
    again; nor does a runner Claude Code calls (``wanted`` False, ``--claude-exit-codes``):
    Claude Code runs those files' hooks itself.
    """
    if not wanted:
        return None, None
    home = environ.get("HOME")
    places = SettingsPlaces(
        home=Path(home) if home else None,
        managed=Path(managed) if managed is not None else MANAGED_SETTINGS,
        managed_explicit=managed is not None,
    )
    if NESTED_VARIABLE not in environ:
        return places, None
    present = [places.managed] + ([places.home / USER_SETTINGS] if places.home else [])
    if not any(path.exists() for path in present):
        return None, None  # nothing is left unread: no warning
    return None, (
        f"{NESTED_VARIABLE} is set, so this runner is a hook of another: Claude Code "
        "settings files are not read (a settings entry that runs the runner cannot recurse)"
    )


@dataclass(frozen=True)
class SettingsPlaces:
    """Where Claude Code's settings files are; None in ``load_ax_config``: none is read."""

    home: Path | None = None  # $HOME: ~/.claude/settings.json
    managed: Path = MANAGED_SETTINGS
    managed_explicit: bool = False  # --managed-settings: a missing file is a problem


@dataclass
class _Loading:
    seen: set[tuple[int, int]] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def ax(self, path: Path, explicit: bool) -> list[AxEntry]:
        found, problems, loaded = load_file(path, explicit, self.seen, validate_ax_document)
        self.problems += problems
        if loaded:
            self.files.append(str(path))
        return found

    def settings(
        self, path: Path, level: Level, explicit: bool = False, vouched: Path | None = None
    ) -> SettingsFile | None:
        """``vouched``: the workspace; the file is read only when the runner's user or root
        alone could have written it, judged on the descriptor read (D191, D386)."""

        def validate(doc: Any, file: str) -> tuple[list[SettingsFile], list[Problem]]:
            settings, problems = read_settings(doc, file, level)
            return [settings], problems

        def vouch(fd: int) -> str | None:
            return None if vouched is None else untrusted_descriptor(fd, path, vouched)

        try:
            found, problems, loaded = load_file(path, explicit, self.seen, validate, vouch)
        except UntrustedFile as exc:  # its hooks would run as the runner
            self.notices.append(f"{path}: ignored: it {exc}")
            return None
        self.problems += problems
        if loaded:
            self.files.append(str(path))
        return found[0] if found else None


def load_ax_config(
    workspace: Path,
    *,
    trusted: bool,
    operator_config: Path | None = None,
    settings: SettingsPlaces | None = None,
    moved: Path | None = None,
) -> AxConfig:
    """Every hooks file, in running order: the operator's AX file, managed settings, user
    settings, then (trusted only) the project's .ax-code/hooks.json, .claude/settings.json and
    .claude/settings.local.json; Claude Code's switches decide which settings hooks run.
    ``moved``: a settings file of the user's hooks that ``hookrunner claude install`` moved
    out of Claude Code's reach, read at the user's level whatever ``settings`` says."""
    loading = _Loading()
    operator = loading.ax(operator_config, True) if operator_config is not None else []
    read = [] if settings is None else _outside(loading, settings, workspace, trusted)
    if moved is not None:  # the user's hooks `hookrunner claude install` moved (D229)
        found = loading.settings(moved, Level.USER, explicit=True, vouched=workspace)
        read += [found] if found is not None else []
    project: list[AxEntry] = []
    if trusted:
        project = loading.ax(workspace / PROJECT_FILE, False)
        if settings is not None:
            for name, level in ((PROJECT_SETTINGS, Level.PROJECT), (LOCAL_SETTINGS, Level.LOCAL)):
                found = loading.settings(workspace / name, level)
                read += [found] if found is not None else []
    else:
        names = (PROJECT_FILE,) if settings is None else (PROJECT_FILE, *_PROJECT_SETTINGS)
        for name in names:
            if (workspace / name).exists():
                loading.notices.append(
                    f"{workspace / name}: project hooks are off: after reviewing them, start "
                    f"the runner with {TRUST_VARIABLE}=1 or --trust-project-hooks"
                )
    running, skipped = _switches(read)
    for item, why in skipped:
        if item.entries:
            loading.notices.append(f"{item.file}: its {len(item.entries)} hooks are skipped: {why}")
    running = [_allowed_urls(item, read, loading.notices) for item in running]
    managed = [e for s in running if s.level is Level.MANAGED for e in s.entries]
    others = [e for s in running if s.level is not Level.MANAGED for e in s.entries]
    policy = next((s for s in read if s.level is Level.MANAGED), None)
    if project and policy is not None and (policy.managed_only or policy.disable_all):
        switch = "allowManagedHooksOnly" if policy.managed_only else "disableAllHooks"
        why = f"{switch} is set in {policy.file}"
        loading.notices.append(f"{workspace / PROJECT_FILE}: its hooks are skipped: {why}")
        project = []
    entries = (*operator, *managed, *_user_first(others, project))
    return AxConfig(entries, tuple(loading.problems), tuple(loading.files), tuple(loading.notices))


def _allowed_urls(item: SettingsFile, read: list[SettingsFile], notices: list[str]) -> SettingsFile:
    """The file without the http hooks whose URL the managed ``allowedHttpHookUrls`` refuses."""
    patterns = next((s.allowed_urls for s in read if s.level is Level.MANAGED), None)
    if patterns is None:
        return item
    kept = []
    for entry in item.entries:
        if entry.http is not None and not url_allowed(entry.http.url, patterns):
            notices.append(
                f"{entry.where}: skipped: its URL is not in the managed allowedHttpHookUrls"
            )
        else:
            kept.append(entry)
    return replace(item, entries=tuple(kept))


def _outside(
    loading: _Loading, places: SettingsPlaces, workspace: Path, trusted: bool
) -> list[SettingsFile]:
    """The settings files outside the repository: managed, then the user's (a $HOME inside
    the workspace makes the user's file the repository's: read only when trusted; one
    outside it that someone else could have written is ignored, with a notice)."""
    found = [loading.settings(places.managed, Level.MANAGED, places.managed_explicit)]
    if places.home is not None:
        user = places.home / USER_SETTINGS
        inside = Path(os.path.realpath(user)).is_relative_to(workspace)
        if not inside:  # its hooks would run as the runner: vouched for (D191, D386)
            found.append(loading.settings(user, Level.USER, vouched=workspace))
        elif trusted:
            found.append(loading.settings(user, Level.USER))
        elif user.exists():
            loading.notices.append(
                f"{user}: $HOME is inside the workspace, so this file is the repository's: "
                f"read only with {TRUST_VARIABLE}=1 or --trust-project-hooks"
            )
    return [item for item in found if item is not None]


def _user_first(others: list[AxEntry], project: list[AxEntry]) -> list[AxEntry]:
    """User settings hooks, then the project's AX file, then project and local settings."""
    user = [e for e in others if e.source.startswith(Level.USER.value)]
    rest = [e for e in others if not e.source.startswith(Level.USER.value)]
    return [*user, *project, *rest]


def _switches(
    read: list[SettingsFile],
) -> tuple[list[SettingsFile], list[tuple[SettingsFile, str]]]:
    """Claude Code's rules: which settings files' hooks run, and why the others do not.

    Managed ``disableAllHooks``: none; managed ``allowManagedHooksOnly``: managed only;
    else ``disableAllHooks`` of the other files (local over project over user) turns their
    hooks off, never the managed ones.
    """
    managed = next((s for s in read if s.level is Level.MANAGED), None)
    if managed is not None and managed.disable_all:
        return [], [(s, f"disableAllHooks is set in {managed.file}") for s in read]
    others = [s for s in read if s.level is not Level.MANAGED]
    if managed is not None and managed.managed_only:
        why = f"allowManagedHooksOnly is set in {managed.file}"
        return [managed], [(s, why) for s in others]
    order = (Level.LOCAL, Level.PROJECT, Level.USER)
    ranked = sorted(others, key=lambda s: order.index(s.level))
    setter = next((s for s in ranked if s.disable_all is not None), None)
    if setter is not None and setter.disable_all:
        why = f"disableAllHooks is set in {setter.file}"
        return [s for s in read if s.level is Level.MANAGED], [(s, why) for s in others]
    return read, []


def validate_ax_files(
    workspace: Path, operator_config: Path | None = None, settings: SettingsPlaces | None = None
) -> tuple[tuple[str, ...], tuple[Problem, ...]]:
    """Every AX hooks and settings file there is, checked without running anything."""
    config = load_ax_config(
        workspace, trusted=True, operator_config=operator_config, settings=settings
    )
    return config.files, config.problems
