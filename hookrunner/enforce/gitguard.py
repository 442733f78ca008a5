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
``--config-env`` and ``GIT_CONFIG_*`` count), and then:

* ``push`` is planned by ``gitpush``: what it pushes is judged on object ids,
  and the push exec'd is exactly those ids, never forced (D370-D372);
* ``send-pack`` passes only as git's smart-HTTP helper runs it
  (``--stateless-rpc``: it connects nowhere), its refspecs judged (D373);
* ``http-push``, an unknown global option, an alias that starts with an option
  or loops are refused: it cannot judge them.

Every git it runs or execs has ``help.autocorrect=0`` after the agent's
options (``gitrun``, D371): git never runs a command other than the one judged.
Anything else is exec'd as the real git with the argv that was judged (an
alias's expansion, never a re-reading of it). A refusal is one line on stderr
and exit status 1. Standard library only (with ``gitrun`` and ``gitpush``,
copied beside it): it runs outside the package.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from sandbox_egress.hookrunner.enforce import gitpush
    from sandbox_egress.hookrunner.enforce.gitrun import (
        Git,
        Real,
        Refusal,
        loader_free,
        spawn,
        wait,
    )
else:  # copied with gitrun.py and gitpush.py into the runner-owned directory, run with -I -S
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gitpush
    from gitrun import Git, Real, Refusal, loader_free, spawn, wait

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
UNJUDGED_COMMANDS = frozenset({"http-push"})
MAX_ALIASES = 16
# What git's own smart-HTTP helper (remote-curl) passes to ``send-pack --stateless-rpc``.
SEND_PACK_OPTIONS = frozenset(
    {
        "--stateless-rpc",
        "--helper-status",
        "--thin",
        "--dry-run",
        "--signed=yes",
        "--signed=if-asked",
        "--atomic",
        "--quiet",
        "--verbose",
        "--progress",
        "--no-progress",
        "--stdin",
    }
)


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


def read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise Refusal("send-pack: its input ended inside a packet")
        data += chunk
    return data


def stdin_refspecs() -> list[str]:
    """The refspecs remote-curl writes before the advertisement: pkt-lines up to a flush,
    read exactly (what follows stays on stdin for send-pack)."""
    specs = []
    while (length := int(read_exactly(0, 4), 16)) != 0:
        if length < 4:
            raise Refusal("send-pack: a packet it cannot read")
        specs.append(read_exactly(0, length - 4).decode("utf-8", "replace").rstrip("\n"))
    return specs


def judge_send_pack(args: list[str]) -> list[str]:
    """``send-pack --stateless-rpc`` as git's smart-HTTP helper runs it (D373): it connects
    nowhere (it turns stdin into a request on stdout), and its refspecs are judged: none
    forced (``+``), none deleting. Any other send-pack is refused. The refspecs it would
    read from stdin are read here and given as arguments instead."""
    options = [a for a in args if a.startswith("-")]
    positional = [a for a in args if not a.startswith("-")]
    unknown = [
        o for o in options if o not in SEND_PACK_OPTIONS and not o.startswith("--push-option=")
    ]
    if "--stateless-rpc" not in options or unknown or not positional:
        raise Refusal("git send-pack cannot be judged; use git push")
    specs = [*positional[1:], *(stdin_refspecs() if "--stdin" in options else [])]
    for spec in specs:
        if spec.startswith("-"):  # send-pack would read it as an option (--force, D512)
            raise Refusal(f"a refspec that reads as an option ({spec}) is refused")
        if spec.startswith("+"):
            raise Refusal(f"a forced push ({spec}) is refused")
        if spec.startswith(":") or not spec:
            raise Refusal(f"a push that deletes a ref ({spec}) is refused")
    kept = [o for o in options if o != "--stdin"]
    return [*kept, "--", positional[0], *specs]


def verdict(real: Real, argv0: str, args: list[str]) -> gitpush.Plan:
    """What to exec as the real git (argv[0] first), or ``Refusal``."""
    env = dict(os.environ)
    base = os.path.basename(argv0)
    dashed = base.startswith("git-") and base != "git-"
    if dashed:
        if base[4:].startswith("-"):  # git-- and git---paginate: git has no such command (D510)
            raise Refusal(f"{base!r} names no git command: cannot judge it")
        options: list[str] = []
        command, information = [base[4:], *args], False
    else:
        options, command, information = split_global(args)
    if information or not command:
        return gitpush.Plan([base if dashed else "git", *args], env, [])
    git = Git(real, options)
    command = resolve(git, command)
    if command[0] in UNJUDGED_COMMANDS:
        raise Refusal(f"git {command[0]} cannot be judged; use git push")
    if command[0] == "send-pack":
        command = ["send-pack", *judge_send_pack(command[1:])]
    if command[0] == "push":
        plan = gitpush.plan_push(git, command[1:])
        if plan is not None:
            return plan
    if dashed and command[0] in ("receive-pack", "upload-pack", "upload-archive"):
        return gitpush.Plan([base, *command[1:]], env, [])  # what git itself runs on a remote
    return gitpush.Plan(git.argv(*command), env, [])


def nothing(plan: gitpush.Plan) -> int:
    """A push whose refspecs matched no ref: what git says then, and nothing run (D511)."""
    if not plan.quiet:
        sys.stderr.write("Everything up-to-date\n")
        sys.stderr.flush()
    return 0


def upstream(real: Real, plan: gitpush.Plan) -> int:
    """Run the push, then record each pushed branch's upstream as ``-u`` would have (in
    the repository the push named: ``-C``, ``--git-dir``; D513)."""
    status = wait(spawn(real, plan.argv, plan.env))
    if status != 0:
        return status
    git = Git(real, list(plan.options))
    for branch, repository, destination in plan.upstream:
        git.run("config", f"branch.{branch}.remote", repository)
        git.run("config", f"branch.{branch}.merge", destination)
        name = destination.removeprefix("refs/heads/")
        if not plan.quiet:
            print(f"branch '{branch}' set up to track '{repository}/{name}'.", flush=True)
    return 0


def judged(real: Real, argv0: str, args: list[str]) -> gitpush.Plan | None:
    try:
        return verdict(real, argv0, args)
    except Refusal as refusal:
        sys.stderr.write(f"git guard (hookrunner): {refusal}\n")
        sys.stderr.flush()
        return None


def guarded(real: Real, argv0: str, args: list[str]) -> int:
    """The broker's worker (D375): judge, run the real git, its exit status."""
    plan = judged(real, argv0, args)
    if plan is None:
        return REFUSED
    if not plan.argv:
        return nothing(plan)
    if plan.upstream:
        return upstream(real, plan)
    return wait(spawn(real, plan.argv, plan.env))


def main(argv: list[str]) -> int:
    """``gitguard.py REAL_GIT ARGV0 ARGS...``: the guard run directly (no broker), for tests
    and tools; it execs the real git by path."""
    if len(argv) < 3:
        sys.stderr.write("usage: gitguard.py REAL_GIT ARGV0 [ARGS...]\n")
        return 2
    real, argv0, args = argv[1], argv[2], argv[3:]
    plan = judged(real, argv0, args)
    if plan is None:
        return REFUSED
    if not plan.argv:
        return nothing(plan)
    if plan.upstream:
        return upstream(real, plan)
    os.execve(real, plan.argv, loader_free(plan.env))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
