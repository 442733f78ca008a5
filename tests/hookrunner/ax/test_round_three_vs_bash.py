"""Round three's spellings (issue 31) against real bash and real git: structure, not words.

Each command runs in real bash in a fresh directory holding a real repository whose
``origin`` is a local bare repository with a diverged ``main`` and a ``.env`` holding a
marker. Only a forced update, a mirror or a deletion changes the bare repository's refs (a
plain push is refused by git as a non-fast-forward), and only a read of ``.env`` prints the
marker. Whenever real bash did either, the pack must refuse, with or without a boundary below
(these are spellings the pack can SEE). Hypothesis composes the spellings (carriers nested in
carriers around payloads). Real programs only: bash 5, git, setarch, sg.
"""

from __future__ import annotations

import platform
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.ax.packs import judge

MARKER = "R3-SECRET-MARKER"
BOTH = judge.Boundary(git=True, mask=True)
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

PUSHES = [
    "git push -f origin main",
    "git push --m origin",
    "git push --de origin topic",
    "git push origin +main",
    "git -c ALIAS.p='push -f' p origin main",
    "P='push -f'; export P; git --config-env=alias.p=P p origin main",
    "git -c remote.origin.push=+HEAD:main push origin",
    "git -c remote.origin.mirror=true push origin",
    "git -c core.fsmonitor='git push -f origin main #' status",
    'f() { git "$@"; }; f push -f origin main',
    "bash -c 'git \"$@\"' _ push -f origin main",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0='push -f' git p origin main",
    "env GIT_CONFIG_PARAMETERS=\"'alias.p=push -f'\" git p origin main",
]
# to standard error: a substitution keeps the standard output of what it runs
READS = ["cat .env >&2", "shopt -s dotglob; cat *env >&2", "GLOBIGNORE=x; cat *env >&2"]


def _carry(kind: str, inner: str) -> str:
    quoted = shlex.quote(inner)
    return {
        "plain": inner,
        "heredoc-pipe": f"cat <<'R3'| sh\n{inner}\nR3\n",
        "trap": f"trap {quoted} EXIT; true",
        "mapfile": f"mapfile -C {shlex.quote(inner + ' #')} -c 1 <<< x",
        "prompt": f"x={shlex.quote('$(' + inner + ')')}; : ${{x@P}}",
        "arith": f"x={shlex.quote('a[$(' + inner + ')]')}; : $((x))",
        "test-eq": f"x={shlex.quote('a[$(' + inner + ')]')}; [[ $x -eq 0 ]]",
        "printf-v": f"printf -v {shlex.quote('a[$(' + inner + ')]')} %s 1",
        "alias": f"shopt -s expand_aliases\nalias r3={quoted}\nr3\n",
        "setarch": f"setarch {platform.machine()} sh -c {quoted}",
        "sg": f"sg root -c {quoted}",
        "eval": f"eval {quoted}",
        "heredoc-split": f"sh <<R3\\\nX\n$({inner})\nR3X\n",
    }[kind]


CARRIERS = ["plain", "heredoc-pipe", "trap", "mapfile", "prompt", "arith", "test-eq",
            "printf-v", "alias", "setarch", "sg", "eval", "heredoc-split"]  # fmt: skip


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("r3")
    env = _environ(root)
    run = lambda *a, cwd=root: subprocess.run(a, cwd=cwd, env=env, check=True, capture_output=True)  # noqa: E731
    run("git", "init", "-q", "--bare", "-b", "main", "remote.git")
    run("git", "init", "-q", "-b", "main", "work")
    work = root / "work"
    run("git", "commit", "-q", "--allow-empty", "-m", "base", cwd=work)
    run(
        "git", "remote", "add", "origin", "../remote.git", cwd=work
    )  # relative: copies push to their own
    run("git", "commit", "-q", "--allow-empty", "-m", "theirs", cwd=work)
    run("git", "push", "-q", "origin", "main", "HEAD:refs/heads/topic", cwd=work)
    run("git", "reset", "-q", "--hard", "HEAD~1", cwd=work)
    run("git", "commit", "-q", "--allow-empty", "-m", "ours", cwd=work)  # diverged from origin
    (work / ".env").write_text(f"KEY={MARKER}\n")
    return root


def _environ(root: Path) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(root),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "LC_ALL": "C"}  # fmt: skip


def _refs(remote: Path) -> str:
    out = subprocess.run(["git", "for-each-ref"], cwd=remote, capture_output=True, text=True)
    return out.stdout


def in_bash(template: Path, command: str, scratch: Path) -> tuple[bool, bool]:
    """(the remote's refs were rewritten, .env was read) when real bash runs ``command``."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(template, scratch, symlinks=True)
    before = _refs(scratch / "remote.git")
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command], cwd=scratch / "work",
        env=_environ(scratch), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return _refs(scratch / "remote.git") != before, MARKER in done.stdout + done.stderr


def refused(command: str, boundary: judge.Boundary) -> bool:
    texts = [(command, "bash")]
    return (
        judge.force_push(texts, boundary) is not None
        or judge.env_file(texts, boundary)[0] is not None
    )


@pytest.mark.parametrize("payload", PUSHES + READS)
def test_each_payload_does_what_it_claims_in_real_bash(
    template: Path, tmp_path: Path, payload: str
) -> None:
    pushed, read = in_bash(template, payload, tmp_path / "s")
    assert (pushed, read) == (payload in PUSHES, payload in READS)
    assert refused(payload, judge.NONE) and refused(payload, BOTH)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(CARRIERS), min_size=1, max_size=2), st.sampled_from(PUSHES + READS))
@example(["heredoc-pipe"], "git push -f origin main")
@example(["heredoc-split"], "cat .env >&2")
def test_whatever_real_bash_runs_the_pack_refuses(
    template: Path, tmp_path_factory: pytest.TempPathFactory, carriers: list[str], payload: str
) -> None:
    command = payload
    for kind in carriers:
        command = _carry(kind, command)
    pushed, read = in_bash(template, command, tmp_path_factory.mktemp("s") / "s")
    if pushed or read:
        assert refused(command, judge.NONE), command
        assert refused(command, BOTH), command


@pytest.mark.parametrize("kind", CARRIERS)
@pytest.mark.parametrize("payload", ["git push -f origin main", "cat .env >&2"])
def test_each_carrier_runs_its_payload_in_real_bash(
    template: Path, tmp_path: Path, kind: str, payload: str
) -> None:
    """The carriers are real: bash runs what they carry (so the property above is not vacuous)."""
    command = _carry(kind, payload)
    pushed, read = in_bash(template, command, tmp_path / "s")
    assert (pushed, read) == (payload.startswith("git"), payload.startswith("cat")), command
    assert refused(command, judge.NONE) and refused(command, BOTH)
