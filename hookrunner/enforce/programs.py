"""Hooks run only programs the agent cannot have written: path-valued variables, filtered.

A command hook is ``/bin/sh -c COMMAND``; every program it names without a
slash (``python3 gate.py``, ``jq``, ``node``) is looked up on ``PATH``, and
interpreters and toolchains find their own code through more variables
(``JAVA_HOME``, ``GEM_PATH``, ``CLASSPATH``, ``RUSTUP_HOME``...) or run a
program a variable names (``GIT_SSH_COMMAND``, ``EDITOR``). An entry inside the
workspace (``<ws>/.venv/bin``, ``<ws>/node_modules/.bin``) or in a directory
the tool user can write lets the agent plant ``python3`` and have it run as the
runner's user instead of the gate. So, for the variables below, only entries
that are **runner-owned** (``isolation.runner_owned``: outside the workspace,
owned by the runner's user or root, not writable by group or others, no
ancestor writable by others unless sticky) are kept; a relative entry (``""``,
``.``, ``bin``) is never kept. A list keeps its other entries in order; a
variable left empty is removed. ``filter_paths`` is pure apart from ``stat``
and returns what it dropped, so the session warns once per dropped entry.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox_egress.hookrunner.enforce.isolation import runner_owned

# Lists of directories (or, for CLASSPATH, jar files) that programs or code are found in.
PATH_LISTS = (
    "PATH",
    "CLASSPATH",
    "GEM_PATH",
    "GOPATH",
    "PKG_CONFIG_PATH",
    "JULIA_LOAD_PATH",
    "R_LIBS",
    "R_LIBS_SITE",
    "R_LIBS_USER",
    "ERL_LIBS",
    "MANPATH",
    "INFOPATH",
)
# One directory that a toolchain's programs or code come from.
PATH_DIRECTORIES = (
    "GEM_HOME",
    "GOROOT",
    "GOBIN",
    "JAVA_HOME",
    "JDK_HOME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "VOLTA_HOME",
    "PNPM_HOME",
    "BUN_INSTALL",
    "DENO_DIR",
    "DENO_INSTALL",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_EXE",
    "SDKMAN_DIR",
    "ASDF_DIR",
    "ASDF_DATA_DIR",
    "NPM_CONFIG_PREFIX",
    "M2_HOME",
    "MAVEN_HOME",
    "GRADLE_HOME",
    "GRADLE_USER_HOME",
    "ANDROID_HOME",
    "ANDROID_SDK_ROOT",
)
# One program (the first word of the value), run by the tools hooks use.
PROGRAMS = (
    "SHELL",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_PROXY_COMMAND",
    "GIT_SEQUENCE_EDITOR",
    "CC",
    "CXX",
)


@dataclass(frozen=True)
class Dropped:
    """One entry of a variable that hooks do not get, for the session's warning line."""

    variable: str
    entry: str

    @property
    def cause(self) -> str:
        if not os.path.isabs(self.entry):
            return "a relative entry finds programs in the hook's working directory, the workspace"
        return (
            "inside the workspace or writable by others than the runner: programs could be planted"
        )


def trusted_file_or_directory(path: str, workspace: Path) -> bool:
    """A runner-owned directory, or a file only the runner can change in one (a jar)."""
    if not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except OSError:
        return runner_owned(path, workspace)  # not there yet: who could make it decides
    if stat.S_ISDIR(info.st_mode):
        return runner_owned(real, workspace)
    unchangeable = info.st_uid in (0, os.geteuid()) and not info.st_mode & (
        stat.S_IWGRP | stat.S_IWOTH
    )
    return unchangeable and runner_owned(os.path.dirname(real), workspace)


def filter_paths(
    env: Mapping[str, str], workspace: Path
) -> tuple[dict[str, str], tuple[Dropped, ...]]:
    """``env`` with only runner-owned entries in its path-valued variables; what was dropped."""
    kept = dict(env)
    dropped: list[Dropped] = []
    for name in (n for n in env if n.upper() in PATH_LISTS):
        entries = env[name].split(os.pathsep)
        good = [e for e in entries if trusted_file_or_directory(e, workspace)]
        dropped += [Dropped(name, e) for e in dict.fromkeys(entries) if e not in good]
        if good:
            kept[name] = os.pathsep.join(good)
        else:
            del kept[name]
    for name in (n for n in env if n.upper() in PATH_DIRECTORIES):
        if not trusted_file_or_directory(env[name], workspace):
            dropped.append(Dropped(name, env[name]))
            del kept[name]
    for name in (n for n in env if n.upper() in PROGRAMS):
        words = env[name].split()
        program = words[0] if words else ""
        if os.path.isabs(program) and not trusted_file_or_directory(program, workspace):
            dropped.append(Dropped(name, program))
            del kept[name]
    return kept, tuple(dropped)
