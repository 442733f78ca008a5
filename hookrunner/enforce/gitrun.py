"""Running the real git for the exec-time guard: captured queries and the guard's own settings.

Part of the guard (``gitguard``), copied beside it into the runner-owned
directory and run with ``python3 -I -S``: standard library only, and cheap to
import (no ``subprocess``, no ``re``). Every git the guard starts or execs gets
the agent's global options first and the guard's settings after them
(``-c`` is last-one-wins, and command-line settings come after the
environment's ``GIT_CONFIG_*``), so the agent cannot take them back:

* ``help.autocorrect=0`` always: git never runs another command than the one
  the guard judged (``git psuh`` is an error, not a push; D371);
* for a push, ``core.hooksPath=/dev/null`` (the agent's ``pre-push`` hook does
  not run inside the guard) and ``protocol.ext.allow=never`` with ``ext``
  removed from ``GIT_ALLOW_PROTOCOL`` (no ``ext::`` program; D372).

Every git it starts has none of the variables that make the dynamic loader or
glibc load a file into it (``LD_*``, ``GCONV_PATH``, ``GLIBC_TUNABLES``...):
code of the agent's inside the real git could exec ``/proc/self/exe``, the
broker's real git, unguarded (D514). The programs git starts lose them too.

Invariants: a query's output is read whole from memory files (no pipe to
deadlock on) and its stdin is ``/dev/null``; ``Refusal`` is the one error, and
its message is what the tool's stderr shows.
"""

from __future__ import annotations

import os
from typing import NamedTuple

ALWAYS = ("help.autocorrect=0",)
PUSHING = ("core.hooksPath=/dev/null", "protocol.ext.allow=never")


class Refusal(Exception):
    """A command the guard refuses; the message is what the tool's stderr shows."""


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


Real = int | str  # the real git: a path, or the broker's descriptor of it (D375)
# Besides every LD_*: what glibc ignores for a set-user-ID program because it loads or
# parses a file the caller names (its unsecvars.h), but TMPDIR, TZDIR and the resolver's;
# and git's own catalogue of translations (they are printf formats, %n included).
LOADED = frozenset(
    {"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "LOCPATH", "MALLOC_TRACE", "NLSPATH"}
    | {"GIT_TEXTDOMAINDIR"}
)


def loader_free(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what would load the agent's code into the real git (D514)."""
    return {k: v for k, v in env.items() if not k.startswith("LD_") and k not in LOADED}


def spawn(real: Real, argv: list[str], env: dict[str, str], stdio: tuple[int, ...] = ()) -> int:
    """Start the real git (``stdio``: descriptors for 0, 1, 2; none: inherited); its pid."""
    env = loader_free(env)
    if isinstance(real, str):
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio)]
        return os.posix_spawn(real, argv, env, file_actions=actions)
    pid = os.fork()
    if pid == 0:
        try:
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
            os.execve(real, argv, env)  # fexecve: the descriptor is close-on-exec
        finally:
            os._exit(127)
    return pid


def wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def run(real: Real, argv: list[str], env: dict[str, str]) -> Ran:
    """Run ``argv`` with stdin closed, its output in memory files."""
    out, err = os.memfd_create("gitguard-out"), os.memfd_create("gitguard-err")
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        status = wait(spawn(real, argv, env, (devnull, out, err)))
        texts = []
        for fd in (out, err):
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            texts.append(b"".join(chunks).decode("utf-8", "replace"))
        return Ran(status, texts[0], texts[1])
    finally:
        for fd in (out, err, devnull):
            os.close(fd)


def settings(pairs: tuple[str, ...]) -> list[str]:
    return [word for pair in pairs for word in ("-c", pair)]


def push_environment(environ: dict[str, str]) -> dict[str, str]:
    """The environment of a git that pushes: ``ext`` never allowed (``GIT_ALLOW_PROTOCOL``
    overrides ``protocol.*.allow``)."""
    env = dict(environ)
    if "GIT_ALLOW_PROTOCOL" in env:
        kept = [p for p in env["GIT_ALLOW_PROTOCOL"].split(":") if p.strip().lower() != "ext"]
        env["GIT_ALLOW_PROTOCOL"] = ":".join(kept)
    return env


class Git:
    """The real git, run with the caller's global options and environment, then the guard's."""

    def __init__(self, real: Real, options: list[str]) -> None:
        self.real = real
        self.options = options
        self._config: dict[str, str] | None = None

    def argv(self, *args: str, pushing: bool = False) -> list[str]:
        extra = settings(ALWAYS + (PUSHING if pushing else ()))
        return ["git", *self.options, *extra, *args]

    def run(self, *args: str, pushing: bool = False) -> Ran:
        env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
        argv = self.argv(*args, pushing=pushing)
        return run(self.real, argv, push_environment(env) if pushing else env)

    def builtins(self) -> frozenset[str]:
        listed = run(self.real, ["git", "--list-cmds=builtins"], dict(os.environ))
        return frozenset(listed.stdout.split())

    def config(self) -> dict[str, str]:
        """Every setting git sees here (files, environment, ``-c``), the last value of each;
        keys as ``git config --list`` writes them (section and name in lower case)."""
        if self._config is None:
            listed = self.run("config", "--null", "--list").stdout
            self._config = {}
            for entry in listed.split("\0"):
                key, _, value = entry.partition("\n")
                if key:
                    self._config[key] = value
        return self._config

    def alias(self, name: str) -> str | None:
        found = self.run("config", "--get", f"alias.{name}")
        return found.stdout.rstrip("\n") if found.returncode == 0 else None

    def mirrors(self) -> list[str]:
        found = self.run("config", "--type=bool", "--get-regexp", r"^remote\..*\.mirror$")
        return [line.split()[0] for line in found.stdout.splitlines() if line.endswith(" true")]

    def receive_packs(self) -> list[str]:
        """Every ``remote.*.receivepack`` set: a program the agent may have written (D372)."""
        return [
            key
            for key in self.config()
            if key.startswith("remote.") and key.endswith(".receivepack")
        ]
