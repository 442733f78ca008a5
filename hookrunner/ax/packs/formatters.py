"""format-after-edit: which formatter fits a file, and whether it is installed (pure lookup).

One table, first match wins; a formatter is "installed" when its program is
on ``PATH`` (or, for prettier, in the workspace's ``node_modules/.bin``).
A file type without an installed formatter is left alone, silently.
"""

from __future__ import annotations

import os
import shutil
from typing import NamedTuple


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


def find_formatter(
    file: str, workspace: str, path_variable: str | None
) -> tuple[Formatter, str] | None:
    """The formatter for ``file`` and its executable, or None when none is installed."""
    suffix = os.path.splitext(file)[1].lower()
    for suffixes, formatters in FORMATTERS:
        if suffix not in suffixes:
            continue
        for formatter in formatters:
            if formatter is PRETTIER:
                local = os.path.join(workspace, "node_modules", ".bin", "prettier")
                if os.path.isfile(local) and os.access(local, os.X_OK):
                    return formatter, local
            found = shutil.which(formatter.program, path=path_variable)
            if found is not None:
                return formatter, found
        return None
    return None
