"""format-after-edit: which formatter fits a file, whether it is installed, and who runs it.

One table, first match wins; a formatter is "installed" when its program is
on ``PATH`` (which the runner has already cut down to runner-owned entries,
``hookrunner.enforce.programs``) or, for prettier, in the workspace's
``node_modules/.bin``. A file type without an installed formatter is left
alone, silently.

No pack runs a program the agent could have written as the runner's user, and
a formatter can execute workspace code even when its own program is the
runner's (prettier loads ``prettier.config.js`` and plugins from
``node_modules``). So ``who_formats`` decides, from this process's user and
``HOOKRUNNER_TOOL_USER`` (default ``nobody``, as for the tools):
* the runner is root and the tool user is not: formatters run **as the tool
  user** (the agent's own rights, nothing more), and the workspace's own
  prettier may be used;
* otherwise (an unprivileged runner, or a tool user that is the runner's own
  user): they run as this user, and never from the workspace;
* the runner is root but the tool user cannot be found: none runs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from typing import NamedTuple

TOOL_USER_VARIABLE = "HOOKRUNNER_TOOL_USER"  # hookrunner.enforce.isolation's, read the same way
DEFAULT_TOOL_USER = "nobody"


class Formatter(NamedTuple):
    program: str
    arguments: tuple[str, ...]  # the file name is appended

    def argv(self, executable: str, file: str) -> list[str]:
        return [executable, *self.arguments, file]

    @property
    def label(self) -> str:
        return " ".join((self.program, *self.arguments))


PRETTIER = Formatter("prettier", ("--write", "--log-level", "warn"))
FORMATTERS: tuple[tuple[frozenset[str], tuple[Formatter, ...]], ...] = (
    (
        frozenset({".py", ".pyi"}),
        (Formatter("ruff", ("format", "--quiet")), Formatter("black", ("-q",))),
    ),
    (
        frozenset(
            {
                ".js",
                ".jsx",
                ".mjs",
                ".cjs",
                ".ts",
                ".tsx",
                ".json",
                ".css",
                ".scss",
                ".less",
                ".html",
                ".vue",
                ".md",
                ".yaml",
                ".yml",
                ".graphql",
            }
        ),
        (PRETTIER,),
    ),  # fmt: skip
    (frozenset({".go"}), (Formatter("gofmt", ("-w",)),)),
    (frozenset({".rs"}), (Formatter("rustfmt", ()),)),
    (frozenset({".sh", ".bash"}), (Formatter("shfmt", ("-w",)),)),
    (
        frozenset({".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh"}),
        (Formatter("clang-format", ("-i",)),),
    ),
    (frozenset({".tf", ".tfvars"}), (Formatter("terraform", ("fmt",)),)),
    (frozenset({".lua"}), (Formatter("stylua", ()),)),
    (frozenset({".zig"}), (Formatter("zig", ("fmt",)),)),
    (frozenset({".dart"}), (Formatter("dart", ("format",)),)),
)


class RunAs(NamedTuple):
    """Who formatters run as: ``uid``/``gid`` None is this process's own user."""

    uid: int | None
    gid: int | None

    @property
    def switched(self) -> bool:
        return self.uid is not None


def who_formats(environ: Mapping[str, str], euid: int) -> RunAs | str:
    """The user formatters run as, or why none may run (module docstring)."""
    if euid != 0:
        return RunAs(None, None)
    spec = environ.get(TOOL_USER_VARIABLE) or DEFAULT_TOOL_USER
    try:
        entry = pwd.getpwuid(int(spec)) if spec.isdigit() else pwd.getpwnam(spec)
    except (KeyError, ValueError):
        return f"the runner is root and the tool user {spec!r} does not exist: no formatter runs"
    if entry.pw_uid == euid:
        return RunAs(None, None)
    return RunAs(entry.pw_uid, entry.pw_gid)


def run_formatter(
    argv: list[str], cwd: str, run_as: RunAs, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """One formatter run, as ``run_as`` (no supplementary groups when switched)."""
    return subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        user=run_as.uid,
        group=run_as.gid,
        extra_groups=[] if run_as.switched else None,
    )


def find_formatter(
    file: str, workspace: str, path_variable: str | None, run_as: RunAs | None = None
) -> tuple[Formatter, str] | None:
    """The formatter for ``file`` and its executable, or None when none is installed.

    The workspace's own prettier only when it would run as the tool user.
    """
    suffix = os.path.splitext(file)[1].lower()
    for suffixes, formatters in FORMATTERS:
        if suffix not in suffixes:
            continue
        for formatter in formatters:
            if formatter is PRETTIER and run_as is not None and run_as.switched:
                local = os.path.join(workspace, "node_modules", ".bin", "prettier")
                if os.path.isfile(local) and os.access(local, os.X_OK):
                    return formatter, local
            found = shutil.which(formatter.program, path=path_variable)
            if found is not None:
                return formatter, found
        return None
    return None
