"""The exec-time git guard: what runs in place of ``git`` inside a tool's mount namespace (D185).

``block-force-push`` (docs/hooks.md#which-layer-stops-what): the pack's
reading of bash is a first answer; this program is what holds where the
command runs. ``toolns`` bind-mounts a
runner-owned wrapper over every path the tool user can run the git binary by
(``/usr/bin/git``, ``/usr/lib/git-core/git`` and through them every dashed
``git-*`` symlink); the wrapper runs this file with an isolated interpreter
(``python3 -I -S``) as ``gitguard.py REAL_GIT ARGV0 ARGS...``. By then the
shell has done every expansion (``eval``, functions, ``"$@"``, here-documents
piped into ``sh``, ``setarch``, ``sg -c``): the guard sees the final argv.

It parses git's global options (``-C``, ``-c``, ``--config-env``,
``--git-dir``, ...), resolves a non-builtin command through ``alias.*`` as git
does (asking the real git, with the same options and environment, so ``-c``,
``--config-env`` and ``GIT_CONFIG_*`` count), and for a ``push`` refuses:

* a mirror push: ``--mirror`` or any abbreviation git accepts (``--m``), or any
  ``remote.*.mirror`` set true;
* a push that ``git push --dry-run --porcelain`` (same options, same
  configuration) reports as forced (``+``) or deleting (``-``);
* what it cannot judge: a ``--`` or ``--end-of-options`` among the push's
  arguments, a dry run that fails, an alias that starts with an option or
  loops, a global option it does not know, ``send-pack`` and ``http-push``.

Anything else is exec'd as the real git with the argv that was judged (an
alias's expansion, never a re-reading of it). A refusal is one line on stderr
and exit status 1. Standard library only: it runs outside the package.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

REFUSED = 1
# Global options that take a value: attached with "=" or as the next argument.
VALUED = ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix")
VALUED_EQUALS = ("--config-env", "--attr-source", "--exec-path")  # only NAME=VALUE
FLAGS = frozenset(
    {
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--no-replace-objects",
        "--bare",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-lazy-fetch",
        "--no-advice",
    }
)
# These print something and exit, or run ``help``/``version``: nothing to judge.
INFORMATION = frozenset(
    {"--exec-path", "--html-path", "--man-path", "--info-path", "-v", "--version", "-h", "--help"}
)
UNJUDGED_COMMANDS = frozenset({"send-pack", "http-push"})
END_OF_OPTIONS = frozenset({"--", "--end-of-options"})
MAX_ALIASES = 16


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def run(argv: list[str], env: dict[str, str]) -> Ran:
    """Run ``argv`` with stdin closed, its output in memory files (no pipe to deadlock on).

    ``subprocess`` is not imported: its imports (``re``, ``enum``, ``locale``)
    would double what every git command pays for the guard."""
    out, err = os.memfd_create("gitguard-out"), os.memfd_create("gitguard-err")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out, 1),
        (os.POSIX_SPAWN_DUP2, err, 2),
    ]
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        texts = []
        for fd in (out, err):
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            texts.append(b"".join(chunks).decode("utf-8", "replace"))
        return Ran(status, texts[0], texts[1])
    finally:
        os.close(out)
        os.close(err)


class Refusal(Exception):
    """A push the guard refuses; the message is what the tool's stderr shows."""


def split_global(args: list[str]) -> tuple[list[str], list[str], bool]:
    """(global options, the command and its arguments, whether only information was asked)."""
    options: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-"):
            return options, args[index:], False
        if arg in INFORMATION or arg.startswith("--list-cmds="):
            return options, args[index:], True
        if arg in FLAGS:
            options.append(arg)
        elif arg in VALUED or arg in VALUED_EQUALS:
            if index + 1 >= len(args):
                return options, args[index:], True  # git reports the missing value
            options += [arg, args[index + 1]]
            index += 1
        elif arg.startswith(tuple(f"{name}=" for name in (*VALUED, *VALUED_EQUALS))):
            options.append(arg)
        else:
            raise Refusal(f"unknown global option {arg!r}: cannot judge this git command")
        index += 1
    return options, [], True


def mirror_option(arg: str) -> bool:
    """``--mirror`` or an abbreviation of it that git's option parser accepts."""
    return len(arg) >= 3 and "--mirror".startswith(arg)


class Git:
    """The real git, run with the caller's global options and environment."""

    def __init__(self, real: str, options: list[str]) -> None:
        self.real = real
        self.options = options

    def run(self, *args: str) -> Ran:
        env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
        return run([self.real, *self.options, *args], env)

    def builtins(self) -> frozenset[str]:
        listed = run([self.real, "--list-cmds=builtins"], dict(os.environ))
        return frozenset(listed.stdout.split())

    def alias(self, name: str) -> str | None:
        found = self.run("config", "--get", f"alias.{name}")
        return found.stdout.rstrip("\n") if found.returncode == 0 else None

    def mirrors(self) -> list[str]:
        found = self.run("config", "--type=bool", "--get-regexp", r"^remote\..*\.mirror$")
        return [line.split()[0] for line in found.stdout.splitlines() if line.endswith(" true")]


def resolve(git: Git, command: list[str]) -> list[str]:
    """The command after alias expansion, as git would run it (a shell alias is left as is)."""
    builtins = git.builtins()
    for _ in range(MAX_ALIASES):
        name = command[0]
        if name in builtins:
            return command
        value = git.alias(name)
        if value is None or value.startswith("!"):
            return command  # an external git-NAME, unknown, or a shell: its git is guarded
        import shlex  # only for an alias: its import of re costs every other command

        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise Refusal(f"alias {name!r} cannot be read ({exc})") from None
        if not words or words[0].startswith("-"):
            raise Refusal(f"alias {name!r} = {value!r}: cannot judge it")
        command = [*words, *command[1:]]
    raise Refusal(f"alias {command[0]!r} expands more than {MAX_ALIASES} times")


def judge_push(git: Git, args: list[str]) -> None:
    """Refuse (``Refusal``) a mirror, forced or deleting push, or one it cannot judge."""
    for arg in args:
        if arg in END_OF_OPTIONS:
            raise Refusal(f"a push with {arg!r} among its arguments cannot be judged")
        if mirror_option(arg):
            raise Refusal(f"a mirror push ({arg}) is refused")
    mirrored = git.mirrors()
    if mirrored:
        raise Refusal(f"a push while {mirrored[0]} is true (a mirror) is refused")
    # "--dry-run" twice at the end: an option left waiting for its value (-o) takes only one.
    tail = ("--dry-run", "--dry-run", "--porcelain")
    dry = git.run("push", "--dry-run", "--porcelain", *args, *tail)
    updates = [line for line in dry.stdout.splitlines() if "\t" in line]
    if not updates and dry.returncode != 0:
        detail = " ".join(dry.stderr.split())[-300:]
        raise Refusal(f"the dry run of this push failed, so it cannot be judged: {detail}")
    for line in updates:  # "<flag>\t<from>:<to>\t<summary>"
        flag, refs = line[:1], line.split("\t")[1]
        if flag == "+":
            raise Refusal(f"a forced push ({refs}) is refused")
        if flag == "-":
            raise Refusal(f"a push that deletes a ref ({refs}) is refused")


def verdict(real: str, argv0: str, args: list[str]) -> list[str]:
    """The argv to exec as the real git (argv[0] first), or ``Refusal``."""
    base = os.path.basename(argv0)
    if base.startswith("git-") and base != "git-":
        options: list[str] = []
        command, information = [base[4:], *args], False
    else:
        options, command, information = split_global(args)
    if information or not command:
        return ["git", *args] if not base.startswith("git-") else [base, *args]
    git = Git(real, options)
    command = resolve(git, command)
    if command[0] in UNJUDGED_COMMANDS:
        raise Refusal(f"git {command[0]} cannot be judged; use git push")
    if command[0] == "push":
        judge_push(git, command[1:])
    if base.startswith("git-") and [base[4:], *args] == command:
        return [base, *args]  # a dashed form git itself runs (git-receive-pack, git-upload-pack)
    return ["git", *options, *command]


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: gitguard.py REAL_GIT ARGV0 [ARGS...]\n")
        return 2
    real, argv0, args = argv[1], argv[2], argv[3:]
    try:
        run = verdict(real, argv0, args)
    except Refusal as refusal:
        sys.stderr.write(f"git guard (hookrunner): {refusal}\n")
        return REFUSED
    os.execv(real, run)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
