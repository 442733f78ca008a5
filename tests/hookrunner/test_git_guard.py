"""The exec-time git guard (issue 31, D185-D187).

The privileged tests run real ``code_execution`` tools as ``nobody`` in real
bash, with a real git and a real bare repository (file transport, so the
remote side is ``git-receive-pack`` through the guarded paths too): every
spelling of a force push, deletion or mirror push that round three found is
stopped at run time, the bare repository's refs unchanged, the refusal in the
tool's error output; ordinary git work and a fast-forward push go through.
The pure parts (global options, abbreviations) run without root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.enforce import gitguard, gitpush, toolns
from tests.hookrunner.gitrepos import git, make_repos, refs, tool


@pytest.mark.parametrize(
    ("args", "split"),
    [
        (["push", "-f"], ([], ["push", "-f"], False)),
        (["-C", "x", "-c", "a.b=c", "p"], (["-C", "x", "-c", "a.b=c"], ["p"], False)),
        (["--config-env=alias.p=P", "p"], (["--config-env=alias.p=P"], ["p"], False)),
        (["--git-dir", "g", "--bare", "push"], (["--git-dir", "g", "--bare"], ["push"], False)),
        (["--exec-path"], ([], ["--exec-path"], True)),
        (["--exec-path=/x", "push"], (["--exec-path=/x"], ["push"], False)),
        (["--version", "push"], ([], ["--version", "push"], True)),
        (["-c"], ([], ["-c"], True)),
    ],
)
def test_global_options(args: list[str], split: tuple[list[str], list[str], bool]) -> None:
    assert gitguard.split_global(args) == split


def test_an_unknown_global_option_cannot_be_judged() -> None:
    with pytest.raises(gitguard.Refusal, match="unknown global option"):
        gitguard.split_global(["--frobnicate", "push"])


@pytest.mark.parametrize(
    ("arg", "mirror"),
    [("--mirror", True), ("--m", True), ("--mir", True), ("--", False), ("-m", False)]
    + [("--no-mirror", False), ("--all", False)],
)
def test_mirror_abbreviations(arg: str, mirror: bool) -> None:
    """git's option parser takes ``--m`` for ``--mirror`` (no other push option begins so)."""
    try:
        push = gitpush.parse([arg, "origin"])
    except gitguard.Refusal:
        assert arg == "-m"  # not a push option: refused as what the guard cannot judge
        return
    assert any(o.name == "mirror" and o.positive for o in push.options) is mirror


def test_the_guard_covers_every_copy_of_the_git_binary() -> None:
    found = toolns.git_paths("/usr/bin:/bin")
    if found is None:
        pytest.skip("no git here")
    real, covered = found
    assert real in covered
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True).stdout
    core_git = os.path.realpath(os.path.join(exec_path.strip(), "git"))
    assert core_git in covered  # /usr/lib/git-core/git: every dashed git-* symlink leads there


FORCED = {
    "alias -c": "git -c alias.p=push p --force origin main",
    "alias -c upper": "git -c ALIAS.p=push p -f origin main",
    "alias --config-env": "P=push git --config-env=alias.p=P p origin +main",
    "push refspec -c": "git -c remote.origin.push=+HEAD:main push origin",
    "mirror -c": "git -c remote.origin.mirror=true push origin",
    "mirror --m": "git push --m origin",
    "function": 'f() { git "$@"; }; f push --force origin main',
    '"$@" script': "printf 'exec \"$@\"\\n' > /tmp/run$$.sh; sh /tmp/run$$.sh git push -f origin main",
    "eval": 'c="git pu"; eval "${c}sh --fo""rce origin main"',
    "here-document | sh": "cat <<'EOF' | sh\ngit push --force origin main\nEOF",
    "setarch": "setarch $(uname -m) git push -f origin main",
    "sg -c": "sg nogroup -c 'git push -f origin main'",
    "plus refspec": "git push origin +main",
    "deletion": "git push origin :keep",
    "--delete": "git push -d origin keep",
    "--prune": "git push --prune origin 'refs/heads/nothing*:refs/heads/*'",
    "dashed git-push": '"$(git --exec-path)"/git-push -f origin main',
    "-C and --git-dir": 'cd /; git -C "$OLDPWD" --git-dir=.git push -f origin main',
    "--exec-path=": 'git --exec-path="$(git --exec-path)" push -f origin main',
    "GIT_DIR": "GIT_DIR=$PWD/.git git push --force-with-lease origin main",
    "shell alias": "git -c 'alias.x=!git push -f' x origin main",
    "alias chain": "git -c alias.a=b -c 'alias.b=push -f' a origin main",
    "option left waiting": "git push origin +main -o",
    "trap": "trap 'git push -f origin main' EXIT; true",
    "mapfile -C": "printf 'a\\n' | mapfile -C 'git push -f origin main #' -c 1 x",
    "${x@P}": "x='$(git push -f origin main)'; : \"${x@P}\"",
    "arithmetic a[$(...)]": "a=(); : $(( a[$(git push -f origin main >&2)0] ))",
    "printf -v": "printf -v 'a[$(git push -f origin main >&2)0]' x",
    "alias of the line": "shopt -s expand_aliases; alias p='git push -f'\np origin main",
    "heredoc EO\\ newline F": "sh <<EO\\\nF\ngit push -f origin main\nEOF\n",
    "core.fsmonitor": "git -c core.fsmonitor='git push -f origin main; false' status",
    "submodule foreach": (
        "export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=protocol.file.allow GIT_CONFIG_VALUE_0=always; "
        "git submodule add -q ../remote.git sub 2>/dev/null; "
        "git -C sub -c user.name=n -c user.email=n@example.test commit -q --amend -m x; "
        "git submodule foreach -q 'git push -f origin HEAD:refs/heads/main'"
    ),
    "end of options": "git push -f -- origin main",
}


@pytest.mark.privileged
@pytest.mark.parametrize("code", FORCED.values(), ids=FORCED.keys())
def test_a_force_push_is_stopped_where_it_runs(repos: tuple[Path, Path], code: str) -> None:
    work, remote = repos
    before = refs(remote)
    ok, output, error = tool(work, code)
    assert refs(remote) == before, (output, error)
    assert "git guard (hookrunner)" in error, (ok, output, error)


@pytest.mark.privileged
def test_ordinary_git_work_and_a_fast_forward_push_go_through(repos: tuple[Path, Path]) -> None:
    work, remote = repos
    code = (
        "set -e; git status --short; git log --format=%s -1; git checkout -q -b topic origin/keep; "
        "git push -q origin topic; echo 2 > f; "
        "git -c user.name=n -c user.email=n@example.test commit -qam two; "
        "git push -q origin topic; git -c alias.p=push p -q origin HEAD:keep; "
        "git push --dry-run origin topic 2>&1 | tail -1; echo done"
    )
    ok, output, error = tool(work, code)
    assert (ok, output) == (True, "diverged\nEverything up-to-date\ndone\n"), error
    head = git(work, "rev-parse", "topic")
    assert git(remote, "rev-parse", "topic") == head
    assert git(remote, "rev-parse", "keep") == head  # a fast-forward through an alias


CARRIERS = (
    "{}",
    'f() {{ "$@"; }}; f {}',
    "eval '{}'",
    "sh -c '{}'",
    "cat <<'EOF' | bash\n{}\nEOF",
    "setarch $(uname -m) {}",
    "x='$({} >&2)'; : \"${{x@P}}\"",
    "trap '{}' EXIT; true",
)
PREFIXES = ("", "-C .", "--git-dir=.git", "-c push.default=current", "-c color.ui=never")
FORCES = (
    "push -f origin main",
    "push --force origin main",
    "push --fo origin main",
    "push origin +main",
    "push --force-with-lease origin main",
    "-c alias.p=push p -f origin main",
    "-c remote.origin.push=+refs/heads/main:refs/heads/main push origin",
    "-c remote.origin.mirror=yes push origin",
    "push --mi origin",
    "push origin :keep",
    "push --delete origin keep",
)


@pytest.mark.privileged
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    carrier=st.sampled_from(CARRIERS),
    prefix=st.sampled_from(PREFIXES),
    force=st.sampled_from(FORCES),
)
def test_compositions_of_carriers_and_forced_pushes_are_stopped(
    carrier: str, prefix: str, force: str
) -> None:
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-"))
    try:
        work, remote = make_repos(top)
        before = refs(remote)
        code = carrier.format(" ".join(part for part in ("git", prefix, force) if part))
        ok, output, error = tool(work, code)
        assert refs(remote) == before, (code, output, error)
        assert "git guard (hookrunner)" in error, (code, ok, output, error)
    finally:
        shutil.rmtree(top)
