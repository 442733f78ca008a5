"""Pushes over smart HTTP and HTTPS through the exec-time git guard (issue 44, D373).

A real ``git http-backend`` (testbed/git_server.py) on loopback, over HTTP and over
HTTPS with a test CA; the tool runs as ``nobody`` in its namespace, so git's own
``git-remote-http(s)`` helper and the ``git send-pack --stateless-rpc`` it starts meet
the guard. A fast-forward lands (it was refused before: the guard refused every
``send-pack``); a forced push is refused whatever its spelling, and so is a forced
update handed to the helper directly.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import procs
from testbed.testca import make_test_pki
from tests.hookrunner.gitrepos import ENV, NOBODY, git, refs, tool

REPO = Path(__file__).resolve().parents[3]
GUARD = "git guard (hookrunner)"


@dataclass
class Served:
    work: Path  # the tool's clone: main diverged from the server's, topic ahead of keep
    remote: Path  # the bare repository the server serves
    env: dict[str, str]  # the tool's environment (the CA for HTTPS)
    url: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(params=["http", "https"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    scheme = str(request.param)
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-http-"))
    top.chmod(0o755)
    child = None
    try:
        root, seed = top / "root", top / "seed"
        root.mkdir()
        git(top, "init", "-q", "-b", "main", str(seed))
        (seed / "f").write_text("1\n")
        git(seed, "add", "f")
        git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
        remote = root / "acme.git"
        git(top, "clone", "-q", "--bare", str(seed), str(remote))
        git(remote, "branch", "keep")
        port = free_port()
        argv = [sys.executable, str(REPO / "testbed" / "git_server.py"), "--root", str(root)]
        argv += ["--listen", f"127.0.0.1:{port}", "--ready", str(top / "ready")]
        env = dict(ENV)
        if scheme == "https":
            (top / "pki").mkdir()
            pki = make_test_pki(top / "pki", ["localhost"], ["127.0.0.1"])
            (top / "pki").chmod(0o755)
            pki.ca_cert.chmod(0o644)
            argv += ["--cert", str(pki.server_cert), "--key", str(pki.server_key)]
            env["GIT_SSL_CAINFO"] = str(pki.ca_cert)
        else:
            argv.append("--plain")
        child = procs.start("git-server", argv, top)
        procs.wait_until("git server ready", (top / "ready").exists, timeout=20, child=child)
        url = f"{scheme}://127.0.0.1:{port}/acme.git"
        work = top / "ws"
        clone = {**os.environ, **env}
        subprocess.run(["git", "clone", "-q", url, str(work)], env=clone, check=True, timeout=60)
        for key, value in (("user.email", "a@example.test"), ("user.name", "a")):
            git(work, "config", key, value)
        git(work, "checkout", "-q", "-b", "topic", "origin/keep")
        (work / "f").write_text("2\n")
        git(work, "commit", "-qam", "two")
        git(work, "checkout", "-q", "main")
        git(work, "commit", "-q", "--amend", "-m", "diverged")
        for path in (work, *work.rglob("*")):
            os.chown(path, NOBODY.uid, NOBODY.gid, follow_symlinks=False)
        yield Served(work, remote, env, url)
    finally:
        if child is not None:
            child.stop()
        shutil.rmtree(top)


@pytest.mark.privileged
def test_a_fast_forward_push_over_smart_http_lands(served: Served) -> None:
    code = "set -e; git push -q origin topic:keep; git push origin topic 2>&1 | tail -1; echo done"
    ok, output, error = tool(served.work, code, served.env)
    topic = git(served.work, "rev-parse", "topic")
    assert (ok, output.endswith("done\n")) == (True, True), (output, error)
    assert git(served.remote, "rev-parse", "keep") == topic
    assert git(served.remote, "rev-parse", "topic") == topic


FORCED = {
    "-f": "git push -f origin main",
    "-q -f": "git push -q -f origin main",
    "--quiet +main:main": "git push --quiet origin +main:main",
    "-q :keep": "git push -q origin :keep",
    "--force-with-lease": "git push --force-with-lease origin main",
    "to the URL": 'git push -q -f "$(git remote get-url origin)" main',
    "the helper driven by hand": (
        "printf 'push +refs/heads/main:refs/heads/main\\n\\n' | "
        '"$(git --exec-path)"/git-remote-http origin "$(git remote get-url origin)"'
    ),
}


@pytest.mark.privileged
@pytest.mark.parametrize("code", FORCED.values(), ids=FORCED.keys())
def test_a_forced_push_over_smart_http_is_refused(served: Served, code: str) -> None:
    before = refs(served.remote)
    ok, output, error = tool(served.work, code, served.env)
    assert refs(served.remote) == before, (output, error)
    assert GUARD in error + output, (ok, output, error)
