"""require-tests-on-stop: were files changed after the session's last test run? (pure)

The pack follows the session through ``PostToolUse``: a file tool that edits
or deletes, or a shell command that changes files (a ``>``/``>>``
redirection to a file, ``rm``, ``mv``, ``cp``, ``sed -i``, ``git checkout``,
``git apply``...), marks the session as changed; a command that runs tests
(``pytest``, ``python -m pytest``, ``npm test``, ``go test``, ``cargo test``,
``make test``...) clears the mark. Commands in one line count in order, so
``sed -i ... && pytest`` leaves nothing pending. At ``Stop``, a pending change
produces the reminder, naming the changed files and the project's test
command when one is recognised; otherwise the pack says nothing.

Whether the tests passed is not known here (the tool's exit status is not in
the PostToolUse payload); a run counts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from sandbox_egress.hookrunner.ax.packs.commands import Command, basename, read_script
from sandbox_egress.hookrunner.ax.packs.envfiles import PATCH_KEYS, PATH_KEYS

MAX_CHANGED = 20
TEST_PROGRAMS = frozenset(
    {"pytest", "py.test", "tox", "nox", "jest", "vitest", "mocha", "rspec", "phpunit", "ctest",
     "bats", "ava", "karma", "nextest"}
)  # fmt: skip
TEST_SUBCOMMANDS = {
    "npm": ("test", "t", "tst"),
    "pnpm": ("test", "t"),
    "yarn": ("test",),
    "bun": ("test",),
    "deno": ("test",),
    "go": ("test",),
    "cargo": ("test", "nextest"),
    "make": ("test", "tests", "check"),
    "mvn": ("test", "verify"),
    "gradle": ("test", "check"),
    "gradlew": ("test", "check"),
    "dotnet": ("test",),
    "mix": ("test",),
    "swift": ("test",),
}
TEST_MODULES = frozenset({"pytest", "unittest", "tox", "nox"})
RUNNERS = {"uv": "run", "poetry": "run", "pipenv": "run", "hatch": "run", "pdm": "run",
           "bundle": "exec", "npx": "", "bunx": "", "pnpx": ""}  # fmt: skip
MUTATING_PROGRAMS = frozenset(
    {"rm", "mv", "cp", "touch", "truncate", "tee", "patch", "rmdir", "ln", "install", "dd"}
)
IN_PLACE = frozenset({"sed", "perl", "gsed"})
GIT_MUTATING = frozenset(
    {"apply", "am", "checkout", "switch", "restore", "reset", "merge", "rebase", "pull",
     "cherry-pick", "revert", "stash", "mv", "rm"}
)  # fmt: skip
SILENT_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
_PYTHON_WRITES = re.compile(
    r"open\([^)]*['\"][wax+]|\.write_(text|bytes)\(|os\.(remove|unlink|rename|replace)\("
    r"|shutil\.(copy|move|rmtree)"
)


class State:
    """What the session changed since its last test run (mutable: one hook run updates it)."""

    def __init__(self, pending: bool = False, changed: list[str] | None = None) -> None:
        self.pending = pending  # changes since the last test run
        self.changed: list[str] = changed or []

    def change(self, what: str) -> None:
        self.pending = True
        if what in self.changed:
            self.changed.remove(what)
        self.changed = [*self.changed, what][-MAX_CHANGED:]

    def tested(self) -> None:
        self.pending = False
        self.changed = []

    def to_json(self) -> dict[str, Any]:
        return {"pending": self.pending, "changed": self.changed}

    @classmethod
    def from_json(cls, value: Any) -> State:
        if not isinstance(value, dict):
            return cls()
        changed = [c for c in value.get("changed", []) if isinstance(c, str)]
        return cls(value.get("pending") is True, changed[-MAX_CHANGED:])


def _unwrap(argv: tuple[str, ...]) -> tuple[str, ...]:
    while argv and basename(argv[0]) in RUNNERS:
        sub = RUNNERS[basename(argv[0])]
        argv = argv[2:] if sub and len(argv) > 1 and argv[1] == sub else argv[1:]
    return argv


def is_test_run(argv: tuple[str, ...]) -> bool:
    argv = _unwrap(argv)
    if not argv:
        return False
    program = basename(argv[0]).removesuffix(".exe")
    rest = [a for a in argv[1:] if not a.startswith("-")]
    if program in TEST_PROGRAMS:
        return True
    if _PYTHON.fullmatch(program):
        return (
            "-m" in argv
            and argv.index("-m") + 1 < len(argv)
            and (argv[argv.index("-m") + 1] in TEST_MODULES)
        )
    subcommands = TEST_SUBCOMMANDS.get(program)
    if subcommands is None or not rest:
        return False
    if rest[0] in subcommands:
        return True
    return (
        program in ("npm", "pnpm", "yarn", "bun")
        and rest[0] == "run"
        and (len(rest) > 1 and rest[1].startswith("test"))
    )


def shell_change(command: Command) -> str | None:
    """What a shell command changes (a path or the program), or None."""
    for operator, target in command.redirects:
        if operator in (">", ">>", ">|", "&>", "&>>") and target not in SILENT_TARGETS:
            return target
    program, args = command.program, command.argv[1:]
    if program in MUTATING_PROGRAMS:
        paths = [a for a in args if not a.startswith("-")]
        return paths[-1] if paths else program
    if program in IN_PLACE and any(a.startswith("-i") or a == "--in-place" for a in args):
        paths = [a for a in args if not a.startswith("-")]
        return paths[-1] if paths else program
    if program == "git":
        words = [a for a in args if not a.startswith("-")]
        if words and words[0] in GIT_MUTATING:
            return f"git {words[0]}"
    return None


def edited_paths(args: Mapping[str, Any]) -> list[str]:
    """The files a file tool call names (path arguments and patch headers)."""
    found = [args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k]]
    for key in PATCH_KEYS:
        if isinstance(args.get(key), str):
            for line in args[key].splitlines():
                for marker in ("*** Add File: ", "*** Update File: ", "*** Delete File: "):
                    if line.startswith(marker):
                        found.append(line[len(marker) :].strip())
    return found


def record(state: State, tool_args: Mapping[str, Any]) -> None:
    """Update the state with one PostToolUse call."""
    command = tool_args.get("command")
    code = tool_args.get("code")
    language = tool_args.get("language", "bash")
    if isinstance(command, str) or (isinstance(code, str) and language in ("bash", "sh")):
        text = command if isinstance(command, str) else str(code)
        for each in read_script(text).commands:
            if is_test_run(each.argv):
                state.tested()
            else:
                change = shell_change(each)
                if change is not None:
                    state.change(change)
        return
    if isinstance(code, str):
        if _PYTHON_WRITES.search(code):
            state.change(f"{language} code")
        return
    paths = edited_paths(tool_args)
    for path in paths or ["a file"]:
        state.change(path)


def test_command(workspace: str) -> str | None:
    """The project's usual test command, when its files say which."""
    makefile = os.path.join(workspace, "Makefile")
    if os.path.isfile(makefile) and re.search(r"^tests?:", _read(makefile), re.MULTILINE):
        return "make test"
    package = os.path.join(workspace, "package.json")
    if os.path.isfile(package):
        try:
            scripts = json.loads(_read(package)).get("scripts", {})
        except (ValueError, AttributeError):
            scripts = {}
        if isinstance(scripts, dict) and "test" in scripts:
            return "npm test"
    for name, command in (("go.mod", "go test ./..."), ("Cargo.toml", "cargo test")):
        if os.path.isfile(os.path.join(workspace, name)):
            return command
    python_markers = ("pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg", "setup.py")
    if any(os.path.isfile(os.path.join(workspace, name)) for name in python_markers):
        return "python -m pytest"
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(1_000_000)
    except OSError:
        return ""


def reminder(state: State, workspace: str) -> str | None:
    if not state.pending:
        return None
    shown = ", ".join(state.changed[-5:]) or "files"
    more = len(state.changed) - 5
    if more > 0:
        shown += f" and {more} more"
    command = test_command(workspace)
    how = f"run `{command}`" if command else "run the project's tests"
    return (
        f"[require-tests-on-stop] Files changed after the last test run ({shown}). "
        f"Before ending, {how} (or the type checks and verification this project uses) "
        "and report the result."
    )
