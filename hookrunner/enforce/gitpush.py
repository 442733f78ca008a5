"""What a ``git push`` pushes, judged on object ids, and the push that carries exactly those.

Part of the exec-time guard (``gitguard``; D370). The agent's options never
reach the guard's own dry run, so no option (``-q``, ``--porcelain``,
``-o``...) can empty or change what the guard reads:

1. its arguments are parsed as git's option parser does (abbreviations,
   bundled short options, ``--no-`` forms, options after the refspecs, ``--``);
   an option it does not know is refused, and so is every deletion
   (``--delete``, ``--prune``, ``:ref``), ``--mirror`` or ``remote.*.mirror``,
   and every receive-pack program (``--receive-pack``, ``--exec``,
   ``remote.*.receivepack``);
2. git's own dry run, built by the guard (no force, ``--porcelain --verbose``,
   hooks off, no ``ext::``), maps the remote and refspecs (``push.default``,
   ``remote.*.push``, ``--all``, ``--tags``, ``--follow-tags``, ``pushurl``) to
   ``source:destination`` pairs;
3. each source is resolved to an object id once; when the agent asked to force
   (``-f``, ``--force-with-lease``, ``+``), a second dry run of exactly the
   pinned ``<oid>:<destination>`` refspecs, compared by git with the remote's
   advertised refs, refuses any update that is not a fast-forward, a new ref or
   up to date;
4. the push the guard execs is those pinned refspecs, never forced, never
   deleting, with hooks off: if the remote or a local ref moved since, git
   itself rejects what is no longer a fast-forward.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING or __package__:
    from sandbox_egress.hookrunner.enforce.gitrun import Git, Refusal, push_environment
else:  # copied beside gitrun.py into the guard's directory (D185)
    from gitrun import Git, Refusal, push_environment

FLAG, VALUE, OPTIONAL = "flag", "value", "optional"
# git push's options (git 2.39): kind and short letter.
OPTIONS: dict[str, tuple[str, str]] = {
    "verbose": (FLAG, "v"),
    "quiet": (FLAG, "q"),
    "repo": (VALUE, ""),
    "all": (FLAG, ""),
    "branches": (FLAG, ""),
    "mirror": (FLAG, ""),
    "delete": (FLAG, "d"),
    "tags": (FLAG, ""),
    "dry-run": (FLAG, "n"),
    "porcelain": (FLAG, ""),
    "force": (FLAG, "f"),
    "force-with-lease": (OPTIONAL, ""),
    "force-if-includes": (FLAG, ""),
    "recurse-submodules": (VALUE, ""),
    "thin": (FLAG, ""),
    "receive-pack": (VALUE, ""),
    "exec": (VALUE, ""),
    "set-upstream": (FLAG, "u"),
    "progress": (FLAG, ""),
    "prune": (FLAG, ""),
    "no-verify": (FLAG, ""),
    "follow-tags": (FLAG, ""),
    "signed": (OPTIONAL, ""),
    "atomic": (FLAG, ""),
    "push-option": (VALUE, "o"),
    "ipv4": (FLAG, "4"),
    "ipv6": (FLAG, "6"),
}
SHORT = {letter: name for name, (_, letter) in OPTIONS.items() if letter}
FORCING = frozenset({"force", "force-with-lease", "force-if-includes"})
DELETING = frozenset({"delete", "prune", "mirror"})
PROGRAMS = frozenset({"receive-pack", "exec"})
SELECTING = frozenset({"all", "branches", "tags", "follow-tags"})  # the dry run's business
UPDATE_FLAGS = frozenset(" *=!+-")


class Option(NamedTuple):
    name: str
    positive: bool
    value: str | None

    def spelling(self) -> str:
        name = self.name if self.positive else no(self.name)
        return f"--{name}" if self.value is None else f"--{name}={self.value}"


class Push(NamedTuple):
    options: list[Option]
    positional: list[str]  # repository, then refspecs
    forced: bool
    help: bool


def no(name: str) -> str:
    return name[3:] if name.startswith("no-") else f"no-{name}"


def long_option(word: str) -> tuple[str, bool]:
    """(option name, positive) for ``word`` (``fo`` of ``--fo``), as git's parser matches."""
    spelt = {name: (name, True) for name in OPTIONS} | {no(n): (n, False) for n in OPTIONS}
    if word in spelt:
        return spelt[word]
    found = {spelt[s] for s in spelt if s.startswith(word)}
    if len(found) != 1:
        why = "ambiguous" if found else "unknown"
        raise Refusal(f"{why} push option --{word}: cannot judge this push")
    return found.pop()


def parse(args: list[str]) -> Push:
    """git push's arguments as its option parser reads them (options anywhere, ``--``)."""
    options: list[Option] = []
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positional += args[index:]
            break
        if arg in ("-h", "--help-all") or (arg == "--help" and not options and not positional):
            return Push([], [], False, True)
        if arg.startswith("--"):
            word, equals, value = arg[2:].partition("=")
            name, positive = long_option(word)
            kind = OPTIONS[name][0]
            if equals and (kind == FLAG or not positive):
                raise Refusal(f"push option --{word} takes no value: cannot judge this push")
            if kind == VALUE and positive and not equals:
                if index >= len(args):
                    raise Refusal(f"push option --{word} lacks its value")
                value, equals = args[index], "="
                index += 1
            options.append(Option(name, positive, value if equals else None))
        elif arg.startswith("-") and arg != "-":
            index = short_options(arg[1:], args, index, options)
        else:
            positional.append(arg)
    forced = any(o.name in FORCING and o.positive for o in options)
    forced |= any(spec.startswith("+") for spec in positional[1:])
    return Push(options, positional, forced, False)


def short_options(cluster: str, args: list[str], index: int, options: list[Option]) -> int:
    for at, letter in enumerate(cluster):
        if letter not in SHORT:
            raise Refusal(f"unknown push option -{letter}: cannot judge this push")
        name = SHORT[letter]
        if OPTIONS[name][0] != VALUE:
            options.append(Option(name, True, None))
            continue
        rest = cluster[at + 1 :]
        if not rest:
            if index >= len(args):
                raise Refusal(f"push option -{letter} lacks its value")
            rest, index = args[index], index + 1
        options.append(Option(name, True, rest))
        break
    return index


def refuse_what_it_cannot_judge(git: Git, push: Push) -> None:
    for option in push.options:
        if option.positive and option.name in DELETING:
            raise Refusal(f"a push with --{option.name} deletes refs: refused")
        if option.positive and option.name in PROGRAMS:
            raise Refusal(f"a push with --{option.name} (the agent's own program) is refused")
    mirrored = git.mirrors()
    if mirrored:
        raise Refusal(f"a push while {mirrored[0]} is true (a mirror) is refused")
    programs = git.receive_packs()
    if programs:
        raise Refusal(f"a push while {programs[0]} is set (the agent's own program) is refused")


class Update(NamedTuple):
    flag: str  # git's porcelain flag: " " fast-forward, "*" new, "=" up to date, "!" rejected
    source: str
    destination: str
    summary: str


def dry_run(git: Git, push: Push, refspecs: list[str]) -> tuple[list[Update], str]:
    """git's own non-forced dry run of ``refspecs`` (the repository first): its updates."""
    selecting = [o.spelling() for o in push.options if o.name in SELECTING]
    argv = ["push", "--dry-run", "--porcelain", "--verbose", "--recurse-submodules=no"]
    ran = git.run(*argv, *selecting, "--", *refspecs, pushing=True)
    updates = []
    for line in ran.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] in UPDATE_FLAGS and ":" in fields[1]:
            source, _, destination = fields[1].rpartition(":")
            updates.append(Update(fields[0], source, destination, fields[2]))
    if not updates and ran.returncode != 0:
        detail = " ".join(ran.stderr.split())[-300:]
        raise Refusal(f"the dry run of this push failed, so it cannot be judged: {detail}")
    return updates, ran.stderr


def judge(updates: list[Update], forced: bool) -> None:
    for update in updates:
        refs = f"{update.source}:{update.destination}"
        if update.flag == "-" or not update.source:
            raise Refusal(f"a push that deletes a ref ({refs}) is refused")
        if update.flag == "+" or (update.flag == "!" and forced):
            raise Refusal(f"a forced push ({refs}, {update.summary}) is refused")


def default_repository(git: Git) -> str:
    """The remote ``git push`` without one pushes to (branch's pushRemote, pushDefault...)."""
    config = git.config()
    head = git.run("symbolic-ref", "-q", "--short", "HEAD").stdout.strip()
    for key in (f"branch.{head}.pushremote", "remote.pushdefault", f"branch.{head}.remote"):
        if (head or not key.startswith("branch.")) and config.get(key):
            return config[key]
    return "origin"


def pin(git: Git, updates: list[Update]) -> dict[str, str]:
    """Each source resolved to an object id, once (refs from one listing, the rest one by one)."""
    listed = git.run("for-each-ref", "--format=%(objectname) %(refname)").stdout
    refs: dict[str, str] = {}
    for line in listed.splitlines():
        oid, _, name = line.partition(" ")
        refs[name] = oid
    pinned = {}
    for source in dict.fromkeys(u.source for u in updates):
        if source in refs:
            pinned[source] = refs[source]
            continue
        found = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", source)
        if found.returncode != 0:
            raise Refusal(f"{source!r} cannot be resolved to an object: cannot judge this push")
        pinned[source] = found.stdout.strip()
    return pinned


class Plan(NamedTuple):
    argv: list[str]  # the real git's argv (argv[0] "git"); empty: nothing to run (D511)
    env: dict[str, str]
    upstream: list[tuple[str, str, str]]  # (branch, repository, destination) for -u
    quiet: bool = False
    options: tuple[str, ...] = ()  # the agent's global options (-C, --git-dir): where -u writes


def plan_push(git: Git, args: list[str]) -> Plan | None:
    """The push to exec in place of ``git push ARGS``; None when it only asks for help."""
    push = parse(args)
    if push.help:
        return None
    refuse_what_it_cannot_judge(git, push)
    repository = push.positional[0] if push.positional else ""
    if not repository:
        repos = [o.value for o in push.options if o.name == "repo" and o.positive and o.value]
        repository = repos[-1] if repos else ""
    specs = [spec.removeprefix("+") for spec in push.positional[1:]]
    mapped, _ = dry_run(git, push, [repository, *specs] if repository else [])
    judge(mapped, push.forced)
    quiet = any(o.name == "quiet" and o.positive for o in push.options)
    if not mapped:  # a push without refspecs would be git's default's, unjudged (D511)
        return Plan([], {}, [], quiet)
    pinned = pin(git, mapped)
    # once each: a remote with several push URLs lists every update once per URL
    refspecs = list(dict.fromkeys(f"{pinned[u.source]}:{u.destination}" for u in mapped))
    repository = repository or default_repository(git)
    if push.forced and mapped:
        judge(dry_run(git, push._replace(options=[]), [repository, *refspecs])[0], True)
    kept = [o for o in push.options if o.name not in SELECTING | FORCING | {"repo"}]
    spelt = [o.spelling() for o in kept if o.name != "set-upstream"]
    follow = ["-c", "push.followTags=false"]
    argv = git.argv(*follow, "push", *spelt, "--", repository, *refspecs, pushing=True)
    upstream = []
    if any(o.name == "set-upstream" and o.positive for o in kept):
        for update in mapped:
            branch = branch_of(git, update.source)
            if branch and update.destination.startswith("refs/heads/"):
                upstream.append((branch, repository, update.destination))
    return Plan(argv, push_environment(dict(os.environ)), upstream, quiet, tuple(git.options))


def branch_of(git: Git, source: str) -> str:
    if source.startswith("refs/heads/"):
        return source.removeprefix("refs/heads/")
    if source == "HEAD":
        return git.run("symbolic-ref", "-q", "--short", "HEAD").stdout.strip()
    return ""
