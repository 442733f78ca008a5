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
* the full environment (``AX_CODE_HOOKS_FULL_ENV=1``, or the kernel's
  ``HOOKRUNNER_FULL_ENV=1``) is read from the runner's environment only, by
  the kernel's one parser (``kernel.env_switch``); nothing in a file can ask for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hookrunner import kernel
from hookrunner.ax.model import AxConfig, AxEntry
from hookrunner.ax.schema import validate_ax_document
from hookrunner.kernel import Switch, env_switch
from hookrunner.loader import load_file
from hookrunner.model import Problem

PROJECT_FILE = Path(".ax-code") / "hooks.json"
TRUST_VARIABLE = "AX_CODE_TRUST_PROJECT_CONFIG"
FULL_ENV_VARIABLE = "AX_CODE_HOOKS_FULL_ENV"


def trust_switch(environ: Mapping[str, str], flag: bool | None = None) -> Switch:
    """Whether project hooks may run: the runner's flag, else AX_CODE_TRUST_PROJECT_CONFIG=1."""
    return env_switch(environ, flag, (TRUST_VARIABLE,))


def full_env_switch(environ: Mapping[str, str], flag: bool | None = None) -> Switch:
    """The escape hatch: the flag, else AX_CODE_HOOKS_FULL_ENV=1 (or HOOKRUNNER_FULL_ENV=1)."""
    return kernel.full_env_switch(environ, flag, FULL_ENV_VARIABLE)


def load_ax_config(
    workspace: Path, *, trusted: bool, operator_config: Path | None = None
) -> AxConfig:
    entries: list[AxEntry] = []
    problems: list[Problem] = []
    files: list[str] = []
    notices: list[str] = []
    seen: set[tuple[int, int]] = set()
    if operator_config is not None:
        found, found_problems, loaded = load_file(operator_config, True, seen, validate_ax_document)
        entries += found
        problems += found_problems
        if loaded:
            files.append(str(operator_config))
    project = workspace / PROJECT_FILE
    if trusted:
        found, found_problems, loaded = load_file(project, False, seen, validate_ax_document)
        entries += found
        problems += found_problems
        if loaded:
            files.append(str(project))
    elif project.exists():
        notices.append(
            f"{project}: project hooks are off: after reviewing them, start the runner with "
            f"{TRUST_VARIABLE}=1 or --trust-project-hooks"
        )
    return AxConfig(tuple(entries), tuple(problems), tuple(files), tuple(notices))


def validate_ax_files(
    workspace: Path, operator_config: Path | None = None
) -> tuple[tuple[str, ...], tuple[Problem, ...]]:
    """Every AX hooks file there is, checked without running anything (trust is not needed)."""
    config = load_ax_config(workspace, trusted=True, operator_config=operator_config)
    return config.files, config.problems
