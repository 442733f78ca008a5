"""The git guard's judgement in this process, without root (issue 44, D370-D373; D530).

``gitpush.parse`` reads a push's arguments as git's option parser does, and
``plan_push``/``gitguard.verdict`` judge them with the real git against a real bare
repository (file transport) in a temporary directory: no namespace, no tool user,
so ``make test-unit`` measures them. The remote has ``main`` and ``keep``; the
clone's ``main`` was amended since, so pushing it forces. What the guard execs is
checked word for word: the agent's options never reach it, the refspecs are pinned
object ids, never forced.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import gitpush
from sandbox_egress.hookrunner.enforce.gitpush import Option, Update
from sandbox_egress.hookrunner.enforce.gitrun import Git, Refusal, push_environment
from tests.hookrunner.gitrepos import diverged_clone, git

REAL = shutil.which("git", path="/usr/bin:/bin") or "/usr/bin/git"
SETTINGS = ["-c", "help.autocorrect=0"]
PUSHING = [*SETTINGS, "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never"]


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the clone, the bare remote); the clone is this process's directory, as the tool's
    directory is the guard's; no user or system git configuration."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    work, remote = tmp_path / "ws", tmp_path / "remote.git"
    diverged_clone(tmp_path, work, remote, "main", "main:keep")
    monkeypatch.chdir(work)
    return work, remote


def pushed(*rest: str) -> list[str]:
    """The argv the guard execs for a push of ``rest`` (repository, pinned refspecs)."""
    return ["git", *PUSHING, "-c", "push.followTags=false", "push", *rest]


@pytest.mark.parametrize(
    ("args", "options", "positional", "forced"),
    [
        (["-qf", "origin", "main"], [("quiet", True, None), ("force", True, None)], ["origin", "main"], True),
        (["origin", "+main"], [], ["origin", "+main"], True),
        (["--porc", "origin"], [("porcelain", True, None)], ["origin"], False),
        (["--no-force", "origin"], [("force", False, None)], ["origin"], False),
        (["--verify"], [("no-verify", False, None)], [], False),
        (["-oci.skip", "origin"], [("push-option", True, "ci.skip")], ["origin"], False),
        (["-o", "ci.skip", "origin"], [("push-option", True, "ci.skip")], ["origin"], False),
        (["-vo", "x"], [("verbose", True, None), ("push-option", True, "x")], [], False),
        (["--repo", "origin"], [("repo", True, "origin")], [], False),
        (["--repo=origin"], [("repo", True, "origin")], [], False),
        (["--force-with-lease=main", "o"], [("force-with-lease", True, "main")], ["o"], True),
        (["origin", "main", "-f"], [("force", True, None)], ["origin", "main"], True),
        (["--", "origin", "-f"], [], ["origin", "-f"], False),
        (["-", "x"], [], ["-", "x"], False),
    ],
)  # fmt: skip
def test_a_push_is_parsed_as_gits_option_parser_reads_it(
    args: list[str],
    options: list[tuple[str, bool, str | None]],
    positional: list[str],
    forced: bool,
) -> None:
    push = gitpush.parse(args)
    assert push == gitpush.Push([Option(*o) for o in options], positional, forced, False)


@pytest.mark.parametrize("args", [["-h"], ["--help-all", "-f"], ["--help"]])
def test_a_request_for_help_is_only_that(args: list[str]) -> None:
    assert gitpush.parse(args) == gitpush.Push([], [], False, True)


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--f", "origin"], "ambiguous push option --f: cannot judge this push"),
        (["--fo", "origin"], "ambiguous push option --fo: cannot judge this push"),
        (["--frobnicate"], "unknown push option --frobnicate: cannot judge this push"),
        (["origin", "--help"], "unknown push option --help: cannot judge this push"),
        (["--force=yes"], "push option --force takes no value: cannot judge this push"),
        (["--no-repo=x"], "push option --no-repo takes no value: cannot judge this push"),
        (["origin", "--repo"], "push option --repo lacks its value"),
        (["origin", "-o"], "push option -o lacks its value"),
        (["-x", "origin"], "unknown push option -x: cannot judge this push"),
        (["-qz"], "unknown push option -z: cannot judge this push"),
    ],
)
def test_what_the_parser_cannot_read_is_refused(args: list[str], refusal: str) -> None:
    with pytest.raises(Refusal) as raised:
        gitpush.parse(args)
    assert str(raised.value) == refusal


def test_an_option_is_spelt_back_in_its_long_form() -> None:
    assert Option("force", False, None).spelling() == "--no-force"
    assert Option("repo", True, "origin").spelling() == "--repo=origin"
    assert Option("all", True, None).spelling() == "--all"
    assert (gitpush.no("no-verify"), gitpush.no("verify")) == ("verify", "no-verify")


@pytest.mark.parametrize(
    ("update", "forced", "refusal"),
    [
        (Update("-", "", "refs/heads/keep", "[deleted]"), False,
         "a push that deletes a ref (:refs/heads/keep) is refused"),
        (Update(" ", "", "refs/heads/keep", "x"), False,
         "a push that deletes a ref (:refs/heads/keep) is refused"),
        (Update("+", "refs/heads/main", "refs/heads/main", "a...b (forced update)"), False,
         "a forced push (refs/heads/main:refs/heads/main, a...b (forced update)) is refused"),
        (Update("!", "refs/heads/main", "refs/heads/main", "[rejected]"), True,
         "a forced push (refs/heads/main:refs/heads/main, [rejected]) is refused"),
    ],
)  # fmt: skip
def test_the_judgement_of_the_dry_runs_updates(update: Update, forced: bool, refusal: str) -> None:
    with pytest.raises(Refusal) as raised:
        gitpush.judge([update], forced)
    assert str(raised.value) == refusal


def test_updates_git_itself_will_reject_or_accept_pass_when_not_forced() -> None:
    updates = [
        Update("!", "refs/heads/main", "refs/heads/main", "[rejected] (non-fast-forward)"),
        Update(" ", "refs/heads/a", "refs/heads/a", "1..2"),
        Update("*", "refs/heads/b", "refs/heads/b", "[new branch]"),
        Update("=", "refs/heads/c", "refs/heads/c", "[up to date]"),
    ]
    gitpush.judge(updates, False)  # the "!" one git itself rejects: no refusal needed
    gitpush.judge(updates[1:], True)  # fast-forward, new, up to date: fine even forced
    with pytest.raises(Refusal, match=r"^a forced push \(refs/heads/main:refs/heads/main, "):
        gitpush.judge(updates, True)


def test_a_forced_push_of_the_diverged_main_is_refused(clone: tuple[Path, Path]) -> None:
    with pytest.raises(Refusal) as raised:
        gitpush.plan_push(Git(REAL, []), ["-q", "-f", "origin", "main"])
    refused = "a forced push (refs/heads/main:refs/heads/main, [rejected] (non-fast-forward))"
    assert str(raised.value) == f"{refused} is refused"


def test_a_push_is_pinned_to_object_ids_and_never_forced(clone: tuple[Path, Path]) -> None:
    work, _ = clone
    main = git(work, "rev-parse", "main")
    plan = gitpush.plan_push(Git(REAL, []), ["-q", "--porcelain", "origin", "main", "HEAD:new"])
    assert plan is not None
    assert plan.argv == pushed("--quiet", "--porcelain", "--", "origin",
        f"{main}:refs/heads/new", f"{main}:refs/heads/main",  # in the dry run's order
    )  # fmt: skip
    assert (plan.upstream, plan.quiet) == ([], True)


def test_a_forced_fast_forward_is_checked_again_and_pushed_unforced(
    clone: tuple[Path, Path],
) -> None:
    work, _ = clone
    git(work, "commit", "-q", "--allow-empty", "-m", "ahead of keep")
    git(work, "branch", "-q", "topic", "HEAD")
    git(work, "reset", "-q", "--hard", "origin/keep")
    git(work, "commit", "-q", "--allow-empty", "-m", "ff")
    head = git(work, "rev-parse", "HEAD")
    plan = gitpush.plan_push(Git(REAL, []), ["--force", "origin", "+main:keep"])
    assert plan is not None
    assert plan.argv == pushed("--", "origin", f"{head}:refs/heads/keep")


def test_set_upstream_is_recorded_per_branch_pushed(clone: tuple[Path, Path]) -> None:
    work, _ = clone
    main = git(work, "rev-parse", "main")
    plan = gitpush.plan_push(Git(REAL, []), ["-u", "origin", "main:refs/heads/topic", "HEAD:x"])
    assert plan is not None
    assert plan.argv == pushed("--", "origin", f"{main}:refs/heads/topic", f"{main}:refs/heads/x")
    assert plan.upstream == [
        ("main", "origin", "refs/heads/topic"),
        ("main", "origin", "refs/heads/x"),
    ]
    assert gitpush.branch_of(Git(REAL, []), "refs/tags/v1") == ""


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["origin", ":keep"], "a push that deletes a ref (:refs/heads/keep) is refused"),
        (["--delete", "origin", "keep"], "a push with --delete deletes refs: refused"),
        (["--prune", "origin"], "a push with --prune deletes refs: refused"),
        (["--mi", "origin"], "a push with --mirror deletes refs: refused"),
        (["--exec=./x", "origin"], "a push with --exec (the agent's own program) is refused"),
        (["--receive-pack", "./x", "origin"],
         "a push with --receive-pack (the agent's own program) is refused"),
    ],
)  # fmt: skip
def test_deletions_mirrors_and_the_agents_programs_are_refused(
    clone: tuple[Path, Path], args: list[str], refusal: str
) -> None:
    with pytest.raises(Refusal) as raised:
        gitpush.plan_push(Git(REAL, []), args)
    assert str(raised.value) == refusal


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        (("remote.origin.mirror", "true"),
         "a push while remote.origin.mirror is true (a mirror) is refused"),
        (("remote.origin.receivepack", "../liar"),
         "a push while remote.origin.receivepack is set (the agent's own program) is refused"),
    ],
)  # fmt: skip
def test_a_mirror_or_a_receive_pack_in_the_configuration_is_refused(
    clone: tuple[Path, Path], setting: tuple[str, str], refusal: str
) -> None:
    work, _ = clone
    git(work, "config", *setting)
    with pytest.raises(Refusal) as raised:
        gitpush.plan_push(Git(REAL, []), ["origin", "main"])
    assert str(raised.value) == refusal


def test_a_push_the_dry_run_cannot_map_is_refused(clone: tuple[Path, Path]) -> None:
    with pytest.raises(Refusal) as raised:
        gitpush.plan_push(Git(REAL, []), ["origin", "no-such-ref"])
    assert str(raised.value).startswith("the dry run of this push failed, so it cannot be judged: ")
    assert "src refspec no-such-ref does not match any" in str(raised.value)


@pytest.mark.parametrize(
    ("config", "repository"),
    [
        ([("branch.main.remote", "origin")], "origin"),
        ([("branch.main.remote", "origin"), ("remote.pushdefault", "mine")], "mine"),
        ([("branch.main.remote", "origin"), ("branch.main.pushremote", "other")], "other"),
    ],
)
def test_without_a_repository_the_push_goes_where_git_would(
    clone: tuple[Path, Path], config: list[tuple[str, str]], repository: str
) -> None:
    """``git push`` alone: the dry run maps it (push.default=simple: main to its upstream),
    the exec'd push names the remote git's own rules pick."""
    work, remote = clone
    git(work, "config", "branch.main.merge", "refs/heads/main")
    for name in ("mine", "other"):
        git(work, "remote", "add", name, str(remote))
    for key, value in config:
        git(work, "config", key, value)
    git(work, "reset", "-q", "--hard", "origin/main")
    git(work, "commit", "-q", "--allow-empty", "-m", "ff")
    head = git(work, "rev-parse", "HEAD")
    plan = gitpush.plan_push(Git(REAL, []), [])
    assert plan is not None
    assert plan.argv == pushed("--", repository, f"{head}:refs/heads/main")
    assert gitpush.default_repository(Git(REAL, [])) == repository


def test_the_repo_option_names_the_repository(clone: tuple[Path, Path]) -> None:
    work, _ = clone
    main = git(work, "rev-parse", "main")
    git(work, "config", "branch.main.remote", "origin")
    git(work, "config", "branch.main.merge", "refs/heads/main")
    plan = gitpush.plan_push(Git(REAL, []), ["--repo=nowhere", "--repo=origin"])
    assert plan is not None
    assert plan.argv == pushed("--", "origin", f"{main}:refs/heads/main")


def test_help_is_passed_to_git_unjudged(clone: tuple[Path, Path]) -> None:
    assert gitpush.plan_push(Git(REAL, []), ["-h"]) is None


# ``spawn`` forks for a descriptor (the guard is single-threaded; a test worker may not be):
# the child only duplicates descriptors and execs.
@pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)
def test_the_real_git_by_its_descriptor_answers_as_by_its_path(clone: tuple[Path, Path]) -> None:
    """The broker hands the worker the real git as a descriptor (D375): queries run the same."""
    fd = os.open(REAL, os.O_RDONLY | os.O_CLOEXEC)
    try:
        by_fd, by_path = Git(fd, []), Git(REAL, [])
        assert by_fd.run("rev-parse", "main") == by_path.run("rev-parse", "main")
        assert by_fd.run("rev-parse", "main").returncode == 0
    finally:
        os.close(fd)


def test_the_push_environment_never_allows_ext() -> None:
    given = {"GIT_ALLOW_PROTOCOL": "file:EXT:https: ext ", "HOME": "/h"}
    assert push_environment(given) == {"GIT_ALLOW_PROTOCOL": "file:https", "HOME": "/h"}
    assert push_environment({"HOME": "/h"}) == {"HOME": "/h"}


def test_the_configuration_git_sees_is_read_once_and_whole(clone: tuple[Path, Path]) -> None:
    work, _ = clone
    git(work, "config", "alias.p", "push -q")
    guarded = Git(REAL, ["-c", "Alias.Q=status"])
    config = guarded.config()
    assert (config["alias.p"], config["alias.q"]) == ("push -q", "status")
    assert guarded.config() is config
    assert (guarded.alias("p"), guarded.alias("q"), guarded.alias("nope")) == (
        "push -q",
        "status",
        None,
    )
    assert "push" in guarded.builtins() and "psuh" not in guarded.builtins()
    assert guarded.argv("status") == ["git", "-c", "Alias.Q=status", *SETTINGS, "status"]
