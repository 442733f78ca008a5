"""The git guard's verdict on a whole git command, in this process, without root (D530).

``gitguard.verdict`` is what the broker's worker and ``gitguard.py`` decide before
they exec the real git: global options split, aliases resolved by asking the real
git, ``send-pack`` judged as git's smart-HTTP helper runs it, ``push`` planned by
``gitpush``. Here it runs against the real git and a real repository in a temporary
directory (the namespace and the tool user are the privileged suites' business:
test_git_guard.py, test_gitguard_round_four.py).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import gitguard
from sandbox_egress.hookrunner.enforce.gitpush import Plan
from sandbox_egress.hookrunner.enforce.gitrun import Refusal
from tests.hookrunner.enforce.test_gitpush_plan import PUSHING, REAL, SETTINGS, clone
from tests.hookrunner.gitrepos import git

__all__ = ["clone"]


def refused(argv0: str, *args: str) -> str:
    with pytest.raises(Refusal) as raised:
        gitguard.verdict(REAL, argv0, list(args))
    return str(raised.value)


def pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


@contextlib.contextmanager
def stdin_of(data: bytes) -> Iterator[None]:
    """This process's descriptor 0 reading ``data`` (as remote-curl feeds send-pack)."""
    saved = os.dup(0)
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    os.dup2(read, 0)
    os.close(read)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def test_an_ordinary_command_runs_as_judged_with_the_guards_settings(
    clone: tuple[Path, Path],
) -> None:
    plan = gitguard.verdict(REAL, "/usr/bin/git", ["-C", ".", "--no-pager", "status", "-s"])
    assert plan.argv == ["git", "-C", ".", "--no-pager", *SETTINGS, "status", "-s"]
    assert (plan.upstream, plan.env["HOME"]) == ([], os.environ["HOME"])


@pytest.mark.parametrize(
    ("argv0", "args", "argv"),
    [
        ("git", ["--version"], ["git", "--version"]),
        ("git", ["-C"], ["git", "-C"]),  # git itself reports the missing value
        ("git", ["--no-pager"], ["git", "--no-pager"]),
        ("git", ["--list-cmds=builtins"], ["git", "--list-cmds=builtins"]),
        ("/usr/lib/git-core/git-receive-pack", ["x.git"], ["git-receive-pack", "x.git"]),
        ("git-upload-pack", ["--strict", "x.git"], ["git-upload-pack", "--strict", "x.git"]),
    ],
)
def test_information_and_the_remote_sides_programs_pass_unchanged(
    clone: tuple[Path, Path], argv0: str, args: list[str], argv: list[str]
) -> None:
    assert gitguard.verdict(REAL, argv0, args).argv == argv


def test_a_dashed_command_is_judged_as_the_command(clone: tuple[Path, Path]) -> None:
    assert refused("/usr/lib/git-core/git-push", "-f", "origin", "main").startswith(
        "a forced push (refs/heads/main:refs/heads/main"
    )
    assert gitguard.verdict(REAL, "git-status", []).argv == ["git", *SETTINGS, "status"]


def test_an_alias_is_resolved_as_git_would_and_its_expansion_judged(
    clone: tuple[Path, Path],
) -> None:
    work, _ = clone
    git(work, "config", "alias.p", "push -q")
    git(work, "config", "alias.pp", "p")
    git(work, "config", "alias.shell", "!git push -f")
    assert refused("git", "pp", "-f", "origin", "main").startswith("a forced push (")
    main = git(work, "rev-parse", "main")
    plan = gitguard.verdict(REAL, "git", ["-c", "alias.s=status", "pp", "origin", "HEAD:new"])
    assert plan.argv == [
        "git", "-c", "alias.s=status", *PUSHING, "-c", "push.followTags=false", "push",
        "--quiet", "--", "origin", f"{main}:refs/heads/new",
    ]  # fmt: skip
    # a shell alias is left to the shell: every git it runs is guarded again
    assert gitguard.verdict(REAL, "git", ["shell"]).argv == ["git", *SETTINGS, "shell"]


@pytest.mark.parametrize(
    ("aliases", "refusal"),
    [
        ({"o": "-c x.y=z push"}, "alias 'o' = '-c x.y=z push': cannot judge it"),
        ({"o": ""}, "alias 'o' = '': cannot judge it"),
        ({"o": 'push "open'}, "alias 'o' cannot be read (No closing quotation)"),
        ({"o": "a", "a": "o"}, "alias 'o' expands more than 16 times"),
    ],
)
def test_an_alias_the_guard_cannot_read_is_refused(
    clone: tuple[Path, Path], aliases: dict[str, str], refusal: str
) -> None:
    work, _ = clone
    for name, value in aliases.items():
        git(work, "config", f"alias.{name}", value)
    assert refused("git", "o", "origin") == refusal


def test_an_unknown_global_option_and_http_push_are_refused(clone: tuple[Path, Path]) -> None:
    assert refused("git", "--frobnicate", "push") == (
        "unknown global option '--frobnicate': cannot judge this git command"
    )
    assert refused("git", "http-push", "x") == "git http-push cannot be judged; use git push"


@pytest.mark.parametrize(
    ("args", "judged"),
    [
        (["--stateless-rpc", "--thin", "https://h/r", "refs/heads/a:refs/heads/a"],
         ["--stateless-rpc", "--thin", "--", "https://h/r", "refs/heads/a:refs/heads/a"]),
        (["--stateless-rpc", "--push-option=x", "u", "a"],
         ["--stateless-rpc", "--push-option=x", "--", "u", "a"]),
    ],
)  # fmt: skip
def test_send_pack_as_the_http_helper_runs_it_passes(args: list[str], judged: list[str]) -> None:
    assert gitguard.judge_send_pack(args) == judged


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["u", "a"], "git send-pack cannot be judged; use git push"),
        (["--stateless-rpc", "--exec=x", "u"], "git send-pack cannot be judged; use git push"),
        (["--stateless-rpc"], "git send-pack cannot be judged; use git push"),
        (["--stateless-rpc", "u", "+a:a"], "a forced push (+a:a) is refused"),
        (["--stateless-rpc", "u", ":a"], "a push that deletes a ref (:a) is refused"),
    ],
)
def test_any_other_send_pack_is_refused(args: list[str], refusal: str) -> None:
    with pytest.raises(Refusal) as raised:
        gitguard.judge_send_pack(args)
    assert str(raised.value) == refusal


def test_send_pack_reads_its_refspecs_from_stdin_exactly() -> None:
    """The pkt-lines up to the flush become arguments; what follows stays on stdin."""
    packets = pkt(b"refs/heads/a\n") + pkt(b"refs/tags/t") + b"0000PACK"
    assert packets[:4] == b"0011"
    with stdin_of(packets):
        judged = gitguard.judge_send_pack(["--stateless-rpc", "--stdin", "https://h/r"])
        rest = os.read(0, 100)
    assert judged == ["--stateless-rpc", "--", "https://h/r", "refs/heads/a", "refs/tags/t"]
    assert rest == b"PACK"


@pytest.mark.parametrize(
    ("packets", "refusal"),
    [
        (b"0009+a:a\n0000", "a forced push (+a:a) is refused"),
        (b"0003", "send-pack: a packet it cannot read"),
        (b"0010refs/he", "send-pack: its input ended inside a packet"),
    ],
)
def test_send_pack_refspecs_on_stdin_are_judged(packets: bytes, refusal: str) -> None:
    with stdin_of(packets), pytest.raises(Refusal) as raised:
        gitguard.judge_send_pack(["--stateless-rpc", "--stdin", "u"])
    assert str(raised.value) == refusal


def test_send_pack_through_verdict(clone: tuple[Path, Path]) -> None:
    plan = gitguard.verdict(REAL, "git", ["send-pack", "--stateless-rpc", "u", "a"])
    assert plan.argv == ["git", *SETTINGS, "send-pack", "--stateless-rpc", "--", "u", "a"]


def test_a_refusal_is_one_line_on_stderr_and_exit_status_one(
    clone: tuple[Path, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    assert gitguard.judged(REAL, "git", ["push", "origin", ":keep"]) is None
    assert gitguard.guarded(REAL, "git", ["push", "--mirror", "origin"]) == gitguard.REFUSED
    assert gitguard.main(["gitguard.py", REAL, "git", "http-push"]) == gitguard.REFUSED
    assert capfd.readouterr().err == (
        "git guard (hookrunner): a push that deletes a ref (:refs/heads/keep) is refused\n"
        "git guard (hookrunner): a push with --mirror deletes refs: refused\n"
        "git guard (hookrunner): git http-push cannot be judged; use git push\n"
    )


def test_the_guard_run_without_its_arguments_says_how(capfd: pytest.CaptureFixture[str]) -> None:
    assert gitguard.main(["gitguard.py", REAL]) == 2
    assert capfd.readouterr().err == "usage: gitguard.py REAL_GIT ARGV0 [ARGS...]\n"


def test_the_worker_runs_the_judged_git_and_records_set_upstream(
    clone: tuple[Path, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """``-u`` is not passed to the pinned push: the guard records each branch's upstream
    after it, and says so as git does (unless ``-q``)."""
    work, remote = clone
    git(work, "checkout", "-q", "-b", "topic", "origin/keep")
    git(work, "commit", "-q", "--allow-empty", "-m", "two")
    assert gitguard.guarded(REAL, "git", ["push", "-u", "origin", "topic"]) == 0
    topic = git(work, "rev-parse", "topic")
    assert git(remote, "rev-parse", "topic") == topic
    assert git(work, "config", "branch.topic.remote") == "origin"
    assert git(work, "config", "branch.topic.merge") == "refs/heads/topic"
    assert "branch 'topic' set up to track 'origin/topic'.\n" in capfd.readouterr().out
    assert gitguard.guarded(REAL, "git", ["push", "-q", "-u", "origin", "topic:other"]) == 0
    assert git(work, "config", "branch.topic.merge") == "refs/heads/other"
    assert "set up to track" not in capfd.readouterr().out
    # a push git itself rejects: its status, and no upstream recorded
    assert gitguard.guarded(REAL, "git", ["push", "-q", "-u", "origin", "main"]) == 1
    assert gitguard.upstream(REAL, Plan(["git", "rev-parse", "nothing"], dict(os.environ), [])) != 0
    assert gitguard.guarded(REAL, "git", ["rev-parse", "--is-inside-work-tree"]) == 0
    assert capfd.readouterr().out.endswith("true\n")
