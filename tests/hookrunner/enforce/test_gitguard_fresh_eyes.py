"""A fresh attacker's review of the exec-time git guard and its broker (D510-D514).

Each spelling below forced or misdirected a push through the guard before its
fix. The unprivileged tests run the guard as its wrapper does (``python3 -I -S
gitguard.py REAL_GIT ARGV0 ARGS``) against real git and a real bare remote; the
privileged ones run a real ``code_execution`` tool as ``nobody`` in its mount
namespace (the wrapper over every git path, the broker holding the real git),
over the file transport and over smart HTTP(S) (``testbed/git_server.py``).

* a dashed name whose command part begins with ``-`` (a link ``git---paginate``
  to git): the guard took ``--paginate`` for the command, judged no push and ran
  ``git --paginate push -f`` (D510);
* a push whose refspecs match no ref (``refs/heads/none*:refs/heads/none*``):
  the dry run maps nothing, and the push the guard ran had no refspecs, so git
  pushed its default, ``remote.origin.push = +main:main``, forced (D511);
* a refspec packet ``--force`` on ``send-pack --stateless-rpc``'s input (the
  smart-HTTP helper driven by hand, ``push --force``): the guard handed it to
  send-pack as an argument, which read it as its ``--force`` option (D512);
* ``git -C DIR push -u``: the upstream was recorded in the current directory's
  repository, not in DIR's (D513).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import gitguard
from tests.hookrunner.enforce.test_gitguard_http import Served, served
from tests.hookrunner.gitrepos import refs, tool

__all__ = ["served"]  # a fixture; `repos` is tests/hookrunner/conftest.py's

GUARD = os.path.abspath(str(gitguard.__file__))
REAL = shutil.which("git") or "/usr/bin/git"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}
ENV["GIT_CONFIG_NOSYSTEM"] = "1"
REFUSED = "git guard (hookrunner): "


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


@pytest.fixture
def clone() -> Iterator[Path]:
    """A clone whose main has diverged from its bare remote's (``../remote.git``: main
    and keep), with ``topic`` one commit ahead of keep."""
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-fresh-"))
    try:
        remote, work = top / "remote.git", top / "ws"
        git(top, "init", "-q", "--bare", "-b", "main", str(remote))
        git(top, "init", "-q", "-b", "main", str(work))
        (work / "f").write_text("1\n")
        git(work, "add", "f")
        git(work, "commit", "-qm", "one")
        git(work, "remote", "add", "origin", "../remote.git")
        git(work, "push", "-q", "origin", "main", "main:keep")
        git(work, "checkout", "-q", "-b", "topic")
        git(work, "commit", "-q", "--allow-empty", "-m", "two")
        git(work, "checkout", "-q", "main")
        git(work, "commit", "-q", "--amend", "-m", "diverged")
        yield work
    finally:
        shutil.rmtree(top)


def guarded(
    cwd: Path, argv0: str, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["python3", "-I", "-S", GUARD, REAL, argv0, *args],
        cwd=cwd,
        env=ENV,
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def remote_refs(work: Path) -> str:
    return refs(work.parent / "remote.git")


@pytest.mark.parametrize("option", ["--paginate", "--no-pager", "--no-replace-objects"])
def test_a_dashed_name_that_carries_a_global_option_is_refused(clone: Path, option: str) -> None:
    before = remote_refs(clone)
    done = guarded(clone, f"/tmp/links/git-{option}", "push", "-f", "origin", "main")
    assert remote_refs(clone) == before, done.stderr
    assert (done.returncode, done.stdout) == (1, b"")
    assert (
        done.stderr.decode() == f"{REFUSED}'git-{option}' names no git command: cannot judge it\n"
    )


@pytest.mark.parametrize(
    "config",
    [
        ["config", "remote.origin.push", "+refs/heads/main:refs/heads/main"],
        ["config", "push.default", "matching"],
    ],
    ids=["remote.origin.push forced", "push.default matching"],
)
@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["", "-q"])
def test_a_push_whose_refspecs_match_nothing_pushes_nothing(
    clone: Path, config: list[str], quiet: list[str]
) -> None:
    git(clone, *config)
    git(clone, "update-ref", "refs/heads/keep", "topic")  # keep would be a fast-forward
    before = remote_refs(clone)
    done = guarded(clone, "git", "push", *quiet, "origin", "refs/heads/none*:refs/heads/none*")
    assert remote_refs(clone) == before, done.stderr
    assert (done.returncode, done.stdout) == (0, b"")
    assert done.stderr == (b"" if quiet else b"Everything up-to-date\n")


def test_upstream_is_recorded_in_the_repository_that_pushed(clone: Path) -> None:
    elsewhere = clone.parent / "elsewhere"
    git(clone.parent, "init", "-q", str(elsewhere))
    done = guarded(elsewhere, "git", "-C", "../ws", "push", "-u", "origin", "topic")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"branch 'topic' set up to track 'origin/topic'.\n"
    assert git(clone, "rev-parse", "--abbrev-ref", "topic@{upstream}") == "origin/topic"
    assert git(elsewhere, "config", "--list", "--local").count("branch.") == 0


def packet(text: str) -> bytes:
    data = text.encode() + b"\n"
    return b"%04x" % (len(data) + 4) + data


@pytest.mark.parametrize("option", ["--force", "--mirror", "--all", "--no-atomic"])
def test_a_send_pack_refspec_that_reads_as_an_option_is_refused(clone: Path, option: str) -> None:
    """As git-remote-http hands a guarded push to send-pack: the refspecs as packets, a
    flush, then the remote's advertisement; what send-pack writes is the request."""
    remote = clone.parent / "remote.git"
    advertised = subprocess.run(
        [REAL, "receive-pack", "--stateless-rpc", "--advertise-refs", str(remote)],
        env=ENV,
        capture_output=True,
        check=True,
    ).stdout
    stdin = packet(option) + packet("refs/heads/main:refs/heads/main") + b"0000" + advertised
    argv = ["send-pack", "--stateless-rpc", "--helper-status", "--no-progress"]
    done = guarded(clone, "git", *argv, "http://example.test/remote.git", "--stdin", stdin=stdin)
    assert (done.returncode, done.stdout) == (1, b""), done.stderr
    assert (
        done.stderr.decode()
        == f"{REFUSED}a refspec that reads as an option ({option}) is refused\n"
    )


@pytest.mark.privileged
def test_a_link_named_git_dash_option_is_refused_in_the_tool(repos: tuple[Path, Path]) -> None:
    work, remote = repos
    before = refs(remote)
    code = 'ln -s "$(command -v git)" ../git---paginate && ../git---paginate push -f origin main'
    ok, output, error = tool(work, code)
    assert refs(remote) == before, (output, error)
    assert (ok, output) == (False, "")
    assert f"{REFUSED}'git---paginate' names no git command" in error


@pytest.mark.privileged
def test_a_push_matching_nothing_pushes_no_default_in_the_tool(repos: tuple[Path, Path]) -> None:
    work, remote = repos
    before = refs(remote)
    code = (
        "git config remote.origin.push +refs/heads/main:refs/heads/main; "
        "git push origin 'refs/heads/none*:refs/heads/none*'"
    )
    ok, output, error = tool(work, code)
    assert refs(remote) == before, (output, error)
    assert (ok, output, error) == (True, "", "Everything up-to-date\n")


@pytest.mark.privileged
def test_the_http_helper_driven_by_hand_cannot_pass_force_as_a_refspec(served: Served) -> None:
    before = refs(served.remote)
    code = (
        "printf 'push --force\\npush refs/heads/main:refs/heads/main\\n\\n' | "
        '"$(git --exec-path)"/git-remote-http origin "$(git remote get-url origin)"'
    )
    ok, output, error = tool(served.work, code, served.env)
    assert refs(served.remote) == before, (output, error)
    assert f"{REFUSED}a refspec that reads as an option (--force) is refused" in error


# A library whose constructor runs inside every process that loads it; inside the real
# git (its executable's name, not the guard's python nor the shell) it leaves a mark and
# execs that same git as ``push -f origin main``: the agent's code holding the real git.
INSIDE = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void inside(void) {
    char exe[4096] = {0};
    const char *mark = getenv("INSIDE_MARK");
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return;
    const char *base = strrchr(exe, '/');
    if (!mark || !base || strcmp(base, "/git") != 0 || getenv("INSIDE_DONE")) return;
    close(open(mark, O_WRONLY | O_CREAT, 0644));
    setenv("INSIDE_DONE", "1", 1);
    char *argv[] = {"git", "push", "-f", "origin", "main", NULL};
    execv("/proc/self/exe", argv);
}
"""
GCONV_MODULES = "module INTERNAL INSIDE// inside 1\nmodule INSIDE// INTERNAL inside 1\n"
LOADERS = {
    "LD_PRELOAD": ("LD_PRELOAD={lib}", "git status --short"),
    "LD_AUDIT": ("LD_AUDIT={lib}", "git status --short"),
    "GCONV_PATH": ("GCONV_PATH={dir}", "git -c i18n.logOutputEncoding=INSIDE log -1 --format=%s"),
}


def build_inside(directory: Path) -> Path:
    """``inside.so`` (also as the gconv module ``inside`` of ``gconv-modules`` beside it)."""
    (directory / "inside.c").write_text(INSIDE)
    library = directory / "inside.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(directory / "inside.c")],
        check=True,
        timeout=120,
    )
    (directory / "gconv-modules").write_text(GCONV_MODULES)
    for path in (directory, library, directory / "gconv-modules"):
        path.chmod(0o755)
    return library


@pytest.mark.parametrize("how", LOADERS.values(), ids=LOADERS.keys())
def test_the_agents_library_is_never_loaded_into_the_real_git(
    clone: Path, how: tuple[str, str]
) -> None:
    library = build_inside(clone.parent)
    setting, command = how
    name, _, value = setting.format(lib=library, dir=clone.parent).partition("=")
    mark = clone.parent / "mark"
    before = remote_refs(clone)
    done = subprocess.run(
        ["python3", "-I", "-S", GUARD, REAL, "git", *command.split()[1:]],
        cwd=clone,
        env={**ENV, name: value, "INSIDE_MARK": str(mark)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert remote_refs(clone) == before, done.stderr
    assert not mark.exists(), done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.privileged
@pytest.mark.parametrize("how", LOADERS.values(), ids=LOADERS.keys())
def test_the_agents_library_never_runs_inside_the_brokers_git(
    repos: tuple[Path, Path], how: tuple[str, str]
) -> None:
    """In the tool, the real git is the broker's (execute-only, non-dumpable, D375): code
    loaded into it could exec ``/proc/self/exe``, the real git, unguarded."""
    work, remote = repos
    library = build_inside(work.parent)
    setting, command = how
    mark = work.parent / "mark"
    before = refs(remote)
    assignment = setting.format(lib=library, dir=work.parent)
    code = f"{assignment} INSIDE_MARK={mark} {command}; echo rc=$?"
    ok, output, error = tool(work, code)
    assert refs(remote) == before, (output, error)
    assert not mark.exists(), (output, error)
    assert (ok, output.splitlines()[-1]) == (True, "rc=0"), error


def broker_workers(directory: str) -> dict[int, tuple[str, str]]:
    """The broker's forked workers (a gitbroker.py process whose parent is one too):
    pid -> (Uid line, CapEff line) of /proc/PID/status."""
    program = os.fsencode(os.path.join(directory, "gitbroker.py"))
    brokers: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if program not in cmdline.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat", "rb") as stat:
                brokers[int(name)] = int(stat.read().rpartition(b")")[2].split()[1])
        except OSError:
            continue
    found = {}
    for pid, parent in brokers.items():
        if parent in brokers:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
                lines = status.read().splitlines()
                uid = next(line for line in lines if line.startswith("Uid:"))
                caps = next(line for line in lines if line.startswith("CapEff:"))
                found[pid] = (" ".join(uid.split()), " ".join(caps.split()))
    return found


# Connects to the broker's socket (named by the wrapper over git) and sends nothing.
SILENT_CLIENT = (
    "python3 -c 'import re, socket, sys, time\n"
    'path = re.search(r"(\\S+/broker[.]sock)", open(sys.argv[1]).read()).group(1)\n'
    "s = socket.socket(socket.AF_UNIX); s.connect(path)\n"
    'print("held", flush=True); time.sleep(float(sys.argv[2]))\' "$(command -v git)" '
)


@pytest.mark.privileged
def test_a_client_that_sends_nothing_holds_no_privileged_worker(
    repos: tuple[Path, Path],
) -> None:
    """A connection that never sends its request: its worker waits as the tool's user with
    no capability, and gives up after ``RECEIVE_TIMEOUT`` (D515)."""
    from sandbox_egress.hookrunner.enforce import gitbroker, toolns

    work, _ = repos
    guard = toolns.git_guard(ENV["PATH"])
    assert guard is not None
    held = gitbroker.RECEIVE_TIMEOUT + 6
    seen: dict[int, tuple[str, str]] = {}
    gone_after: list[float] = []
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        running = pool.submit(tool, work, SILENT_CLIENT + str(held) + "; git --version")
        while not running.done() and time.monotonic() - started < held + 30:
            workers = broker_workers(guard.directory)
            seen.update(workers)
            if seen and not workers and not gone_after:
                gone_after.append(time.monotonic() - started)
            time.sleep(0.2)
        ok, output, error = running.result(timeout=60)
    assert (ok, output.startswith("held\ngit version ")) == (True, True), (output, error)
    assert seen, "no worker was seen waiting for the request"
    assert set(seen.values()) == {("Uid: 65534 65534 65534 65534", "CapEff: 0000000000000000")}
    assert gone_after and gone_after[0] < held, "the worker waited as long as the client held"


def test_the_same_judgements_in_process(
    clone: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """D510, D511, D512 and D514 through the guard's functions (what the broker's worker
    calls), with the real git: the refusals' lines, the plan that runs nothing."""
    from sandbox_egress.hookrunner.enforce import gitpush, gitrun

    monkeypatch.chdir(clone)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    git(clone, "config", "remote.origin.push", "+refs/heads/main:refs/heads/main")
    before = remote_refs(clone)
    assert gitguard.guarded(REAL, "/x/git---paginate", ["push", "-f", "origin", "main"]) == 1
    plan = gitpush.plan_push(gitrun.Git(REAL, []), ["origin", "refs/heads/none*:refs/heads/n*"])
    assert plan == gitpush.Plan([], {}, [], False)
    assert gitguard.guarded(REAL, "git", ["push", "origin", "refs/heads/none*:refs/n*"]) == 0
    assert gitguard.guarded(REAL, "git", ["push", "-q", "origin", "refs/heads/none*:refs/n*"]) == 0
    monkeypatch.setattr(gitguard, "stdin_refspecs", lambda: ["--force", "main:main"])
    with pytest.raises(gitrun.Refusal, match=r"reads as an option \(--force\)"):
        gitguard.judge_send_pack(["--stateless-rpc", "--stdin", "http://example.test/r.git"])
    monkeypatch.setattr(gitguard, "stdin_refspecs", lambda: ["main:main"])
    judged = gitguard.judge_send_pack(["--stateless-rpc", "--stdin", "http://example.test/r"])
    assert judged == ["--stateless-rpc", "--", "http://example.test/r", "main:main"]
    assert remote_refs(clone) == before
    assert capsys.readouterr().err == (
        f"{REFUSED}'git---paginate' names no git command: cannot judge it\nEverything up-to-date\n"
    )
    env = {"LD_PRELOAD": "x", "LD_AUDIT": "x", "GCONV_PATH": "x", "TMPDIR": "/t", "PATH": "/p"}
    env["GIT_TEXTDOMAINDIR"] = "/x"  # translations are printf formats inside the real git
    assert gitrun.loader_free(env) == {"TMPDIR": "/t", "PATH": "/p"}
