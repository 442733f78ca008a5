"""A property of the exec-time git guard over generated push command lines (issue 44, D370).

Real git, a real bare remote, the guard run as git's wrapper runs it
(``python3 -I -S gitguard.py REAL_GIT git ARGS``) in a copy of one prepared
clone per example. The remote has ``main`` and ``keep`` at one commit; the
clone's ``main`` is a diverged root commit (pushing it forces) and ``ahead``
(checked out) is one commit past the remote's. Whatever options, spellings,
remotes, refspecs and configuration the command line carries:

* no protected ref is deleted, and none moves to a commit that does not descend
  from where it was (no forced update lands);
* a command line whose every update is a fast-forward or a new ref lands, all
  of it, whether it asked to force or not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.enforce import gitguard

GUARD = os.path.abspath(str(gitguard.__file__))
REAL = shutil.which("git") or "/usr/bin/git"
ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "LANG": "C.UTF-8",
    "GIT_CONFIG_NOSYSTEM": "1",
}
PROTECTED = ("refs/heads/main", "refs/heads/keep")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [REAL, "-c", "user.name=t", "-c", "user.email=t@example.test", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def heads(remote: Path) -> dict[str, str]:
    listed = git(remote, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in listed.splitlines())


def descends(remote: Path, old: str, new: str) -> bool:
    done = subprocess.run(
        [REAL, "merge-base", "--is-ancestor", old, new], cwd=remote, env=ENV, check=False
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def prepared() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-prop-"))
    try:
        remote, work = top / "remote.git", top / "ws"
        git(top, "init", "-q", "--bare", "-b", "main", str(remote))
        git(remote, "config", "receive.advertisePushOptions", "true")  # for -o
        git(top, "init", "-q", "-b", "main", str(work))
        (work / "f").write_text("1\n")
        git(work, "add", "f")
        git(work, "commit", "-qm", "one")
        git(work, "remote", "add", "origin", "../remote.git")
        git(work, "push", "-q", "origin", "main", "main:keep")
        git(work, "fetch", "-q", "origin")
        git(work, "checkout", "-q", "-b", "ahead")
        (work / "f").write_text("2\n")
        git(work, "commit", "-qam", "two")
        git(work, "tag", "-a", "-m", "t", "v1")
        git(work, "checkout", "-q", "main")
        git(work, "commit", "-q", "--amend", "-m", "diverged")
        git(work, "checkout", "-q", "ahead")
        yield top
    finally:
        shutil.rmtree(top)


def guarded(work: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["python3", "-I", "-S", GUARD, REAL, "git", *argv],
        cwd=work,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


QUIET = st.sampled_from([[], ["-q"], ["--quiet"], ["-v"], ["--porcelain"], ["-q", "--porcelain"]])
FORCE = st.sampled_from(
    [[], ["-f"], ["--force"], ["--fo" + "rce"], ["--force-with-lease"], ["--force-if-includes"]]
    + [["--force-with-lease=refs/heads/main"], ["-qf"], ["-fq"], ["-fu"]]
)
HARMLESS = st.lists(
    st.sampled_from(["--atomic", "-o", "--thin", "--progress", "--no-verify", "-u", "-4"]),
    max_size=2,
)
REMOTE = st.sampled_from([["origin"], ["../remote.git"], ["--repo=origin"]])
CONFIG = st.sampled_from(
    [[], ["-c", "push.default=matching"], ["-c", "push.default=current"]]
    + [["-c", "remote.origin.push=+refs/heads/main:refs/heads/main"]]
    + [["-c", "remote.origin.mirror=true"], ["-c", "push.followTags=true"]]
    + [["-c", "alias.p=push"], ["-c", "help.autocorrect=immediate"]]
)
ANY_REFSPEC = st.sampled_from(
    ["main", "+main", "main:keep", "+main:refs/heads/keep", ":keep", "+:keep", "+:", ":"]
    + ["ahead:keep", "+ahead:keep", "HEAD:refs/heads/new", "+HEAD:main", "--delete", "-d"]
    + ["--prune", "--mirror", "--all", "--tags", "--follow-tags", "refs/heads/*:refs/heads/*"]
    + ["+refs/heads/*:refs/heads/*", "v1", "+v1:refs/tags/v1", "ahead~1:keep"]
    + ["refs/heads/none*:refs/heads/none*"]  # maps to nothing (D511)
)
FAST_FORWARD = st.sampled_from(
    ["ahead:keep", "+ahead:keep", "ahead:main", "+ahead:refs/heads/main", "HEAD:refs/heads/new"]
    + ["ahead", "+ahead", "refs/heads/ahead:refs/heads/keep", "v1"]
)


def destination(spec: str) -> str:
    """The remote ref a fast-forward refspec of ``FAST_FORWARD`` updates."""
    name = spec.removeprefix("+").rpartition(":")[2]
    if name.startswith("refs/"):
        return name
    return "refs/tags/v1" if name == "v1" else f"refs/heads/{name}"


def command(
    config: list[str], options: list[str], remote: list[str], specs: list[str]
) -> list[str]:
    verb = {"alias.p=push": "p", "help.autocorrect=immediate": "psuh"}.get(
        config[-1:][0] if config else "", "push"
    )
    flat = [word for option in options for word in ([option, "x"] if option == "-o" else [option])]
    if remote == ["--repo=origin"]:
        return [*config, verb, *flat, *remote]  # --repo: no refspec may follow it
    return [*config, verb, *flat, *remote, *specs]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    config=CONFIG,
    quiet=QUIET,
    force=FORCE,
    harmless=HARMLESS,
    remote=REMOTE,
    specs=st.lists(ANY_REFSPEC, min_size=0, max_size=3),
)
@example(config=[], quiet=["-q"], force=["-f"], harmless=[], remote=["origin"], specs=["main"])
@example(config=[], quiet=["--quiet"], force=[], harmless=[], remote=["origin"], specs=["+main"])
@example(config=[], quiet=["-q"], force=[], harmless=[], remote=["origin"], specs=[":keep"])
@example(
    config=["-c", "remote.origin.push=+refs/heads/main:refs/heads/main"],
    quiet=[],
    force=[],
    harmless=[],
    remote=["origin"],
    specs=["refs/heads/none*:refs/heads/none*"],
)
def test_no_forced_update_or_deletion_of_a_protected_ref_ever_lands(
    prepared: Path,
    config: list[str],
    quiet: list[str],
    force: list[str],
    harmless: list[str],
    remote: list[str],
    specs: list[str],
) -> None:
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-ex-"))
    try:
        shutil.copytree(prepared, top, dirs_exist_ok=True, symlinks=True)
        before = heads(top / "remote.git")
        argv = command(config, [*quiet, *force, *harmless], remote, specs)
        done = guarded(top / "ws", argv)
        after = heads(top / "remote.git")
        for ref in PROTECTED:
            assert ref in after, (argv, done.stderr)
            assert descends(top / "remote.git", before[ref], after[ref]), (argv, done.stderr)
    finally:
        shutil.rmtree(top)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    quiet=QUIET,
    force=FORCE,
    harmless=HARMLESS,
    remote=st.sampled_from([["origin"], ["../remote.git"]]),
    specs=st.lists(FAST_FORWARD, min_size=1, max_size=3, unique=True),
)
def test_fast_forwards_always_land(
    prepared: Path,
    quiet: list[str],
    force: list[str],
    harmless: list[str],
    remote: list[str],
    specs: list[str],
) -> None:
    if len({destination(spec) for spec in specs}) < len(specs):
        return  # two refspecs for one destination: git refuses that line itself
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-ex-"))
    try:
        shutil.copytree(prepared, top, dirs_exist_ok=True, symlinks=True)
        argv = command([], [*quiet, *force, *harmless], remote, specs)
        done = guarded(top / "ws", argv)
        after = heads(top / "remote.git")
        ahead = git(top / "ws", "rev-parse", "ahead")
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        tag = git(top / "ws", "rev-parse", "v1")
        for spec in specs:
            expected = tag if spec == "v1" else ahead
            assert after.get(destination(spec)) == expected, (argv, spec, done.stderr)
    finally:
        shutil.rmtree(top)


def test_every_push_url_gets_the_pinned_push_and_a_force_reaches_none(prepared: Path) -> None:
    """A remote with two ``pushurl``s: the dry run lists each update once per URL."""
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-ex-"))
    try:
        shutil.copytree(prepared, top, dirs_exist_ok=True, symlinks=True)
        git(top, "clone", "-q", "--bare", "remote.git", "second.git")
        work = top / "ws"
        for url in ("../remote.git", "../second.git"):
            git(work, "config", "--add", "remote.origin.pushurl", url)
        before = {name: heads(top / name) for name in ("remote.git", "second.git")}
        forced = guarded(work, ["push", "-q", "-f", "origin", "main"])
        assert forced.returncode == 1, forced.stderr
        assert "git guard (hookrunner): a forced push" in forced.stderr
        assert {name: heads(top / name) for name in before} == before
        done = guarded(work, ["push", "-q", "origin", "ahead:keep"])
        assert done.returncode == 0, done.stderr
        ahead = git(work, "rev-parse", "ahead")
        for name in ("remote.git", "second.git"):
            assert heads(top / name)["refs/heads/keep"] == ahead
    finally:
        shutil.rmtree(top)
