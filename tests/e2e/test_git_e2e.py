"""End to end, git over HTTPS (docs/configuration.md#git-over-https): the real `git` client through the real proxy
against `git http-backend` (testbed/git_server.py) in the upstream namespace.

Fetch is allowed by repository; a push lands only when every ref it updates matches
`refs/heads/agent/**` of its repository; a refused push leaves the bare repository
unchanged and `git push` prints the policy's reason per ref; a forged command list sent
with curl is refused before anything reaches the server. Large and HTTP/2 pushes:
tests/e2e/test_git_large_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox_egress.proxy.clauses.git import pkt
from testbed import procs
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import REPO, PrivateProxy

pytestmark = pytest.mark.netns

GIT_PORT = 9443
HOST = "api.allowed.test"
CONFIG = f"""\
network:
  allowlist:
    - domain: {HOST}
      git:
        fetch: ["acme/*"]
        push:
          - repo: "acme/web"
            refs: ["refs/heads/agent/**"]
          - repo: "acme/tools"
            refs: ["refs/heads/**"]
            delete: true
      rules:
        - methods: [GET]
      budget:
        upload: "1GiB/day"
    - domain: 198.18.1.0/24
"""


@dataclass
class GitServer:
    root: Path
    child: procs.Child

    def heads(self, repo: str) -> str:
        return git(["for-each-ref", "--format=%(refname) %(objectname)"], self.root / repo)

    def requests(self) -> list[str]:
        return self.child.stderr.read_text().splitlines()


def git(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def git_server(
    topology: Topology, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GitServer]:
    root = tmp_path_factory.mktemp("git-root")
    seed = tmp_path_factory.mktemp("git-seed")
    git(["init", "-q", "-b", "main"], seed)
    (seed / "README").write_text("hello\n")
    git(["-c", "user.name=t", "-c", "user.email=t@t", "add", "README"], seed)
    git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "seed"], seed)
    for repo in ("acme/web.git", "acme/tools.git", "evil/web.git"):
        git(["clone", "-q", "--bare", str(seed), str(root / repo)], root)
        git(["branch", "agent/old"], root / repo)
    ready = root / "ready"
    child = procs.start(
        "git-server",
        topology.exec_prefix(topology.ns_upstream)
        + [sys.executable, str(REPO / "testbed" / "git_server.py"), "--root", str(root)]
        + ["--listen", f"{UPSTREAM_IP}:{GIT_PORT}", "--ready", str(ready)]
        + ["--cert", str(pki.server_cert), "--key", str(pki.server_key)],
        root,
    )
    try:
        procs.wait_until("git server ready", ready.exists, timeout=20, child=child)
        yield GitServer(root, child)
    finally:
        child.stop()


@dataclass
class Client:
    env: dict[str, str]
    work: Path

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *argv], cwd=cwd or self.work, env=self.env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip

    def url(self, repo: str) -> str:
        return f"https://{HOST}:{GIT_PORT}/{repo}.git"


@pytest.fixture
def client(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path
) -> tuple[Client, PrivateProxy]:
    p = private_proxy("git", CONFIG)
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "https_proxy": proxy,
        "GIT_SSL_CAINFO": str(p.view.proxy_ca),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "a@a",
        "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "a@a",
    }  # fmt: skip
    return Client(env, tmp_path), p


def clone_and_commit(c: Client, repo: str) -> Path:
    done = c.run("clone", "-q", c.url(repo), "work")
    assert done.returncode == 0, done.stderr
    work = c.work / "work"
    (work / "change").write_text("agent work\n")
    assert c.run("add", "change", cwd=work).returncode == 0
    assert c.run("commit", "-qm", "agent", cwd=work).returncode == 0
    return work


def test_clone_is_allowed_by_repository(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, p = client
    assert c.run("clone", "-q", c.url("acme/web"), "web").returncode == 0
    assert (c.work / "web" / "README").read_text() == "hello\n"
    refused = c.run("clone", "-q", c.url("evil/web"), "evil")
    assert refused.returncode != 0
    assert "403" in refused.stderr
    lines = p.view.audit_log.all()
    assert ("rule_mismatch", "git.fetch") in [(a["reason"], a.get("clause")) for a in lines]


def test_push_to_an_agent_branch_lands(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, p = client
    work = clone_and_commit(c, "acme/web")
    done = c.run("push", "origin", "HEAD:refs/heads/agent/fix-1", cwd=work)
    assert done.returncode == 0, done.stderr
    head = c.run("rev-parse", "HEAD", cwd=work).stdout.strip()
    assert f"refs/heads/agent/fix-1 {head}" in git_server.heads("acme/web.git")


def refused_push(c: Client, server: GitServer, *refspecs: str) -> str:
    """Push a new commit of acme/web with `refspecs`; the push fails, no receive-pack POST
    reaches the server and its refs are unchanged. git's stderr."""
    before = server.heads("acme/web.git")
    work = clone_and_commit(c, "acme/web")
    seen = len(server.requests())
    done = c.run("push", "origin", *refspecs, cwd=work)
    assert done.returncode != 0
    assert not any(r.startswith("POST") and "receive-pack" in r for r in server.requests()[seen:])
    assert server.heads("acme/web.git") == before
    return done.stderr


def test_push_to_main_is_refused_with_the_reason_and_lands_nothing(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, p = client
    stderr = refused_push(c, git_server, "HEAD:refs/heads/main")
    assert "[remote rejected] HEAD -> main (egress policy: this ref may not be pushed)" in stderr
    assert any(a["reason"] == "git_push_denied" for a in p.view.audit_log.all())


def test_a_push_mixing_allowed_and_refused_refs_lands_nothing(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, _ = client
    stderr = refused_push(c, git_server, "HEAD:refs/heads/agent/mixed", "HEAD:refs/heads/main")
    assert "agent/mixed (egress policy: refused with the rest of this push)" in stderr
    assert "main (egress policy: this ref may not be pushed)" in stderr


def test_deletion_is_refused_unless_the_item_allows_it(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, _ = client
    assert c.run("clone", "-q", c.url("acme/web"), "web").returncode == 0
    refused = c.run("push", "origin", ":refs/heads/agent/old", cwd=c.work / "web")
    assert refused.returncode != 0
    assert "deleting this ref is not allowed" in refused.stderr
    assert "refs/heads/agent/old" in git_server.heads("acme/web.git")
    assert c.run("clone", "-q", c.url("acme/tools"), "tools").returncode == 0
    allowed = c.run("push", "origin", ":refs/heads/agent/old", cwd=c.work / "tools")
    assert allowed.returncode == 0, allowed.stderr
    assert "refs/heads/agent/old" not in git_server.heads("acme/tools.git")


def test_a_push_to_a_repository_without_push_item_is_refused(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, _ = client
    before = git_server.heads("evil/web.git")
    # The advertisement itself is refused: git never gets to send a command list.
    done = c.run("push", c.url("evil/web"), "refs/heads/main:refs/heads/agent/x", cwd=c.work)
    assert done.returncode != 0
    assert git_server.heads("evil/web.git") == before


def curl(c: Client, p: PrivateProxy, body: bytes, *headers: str) -> tuple[int, str]:
    argv = ["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", "--cacert",
            str(p.view.proxy_ca), "-x", c.env["https_proxy"], "--data-binary", "@-",
            "-H", "Content-Type: application/x-git-receive-pack-request"]  # fmt: skip
    for header in headers:
        argv += ["-H", header]
    done = subprocess.run(
        [*argv, c.url("acme/web") + "/git-receive-pack"], input=body, capture_output=True,
        timeout=60,
    )  # fmt: skip
    return int(done.stdout or b"0"), done.stderr.decode(errors="replace")


COMMAND = b"0" * 40 + b" " + b"1" * 40 + b" refs/heads/main"
CHUNKED = "Transfer-Encoding: chunked"


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        (pkt(COMMAND + b"\0 report-status\n") + b"0000", (), "ng refs/heads/main"),
        (b"zzzz not a pkt-line", (), "git_push_denied"),
        (pkt(COMMAND + b"\n"), (), "git_push_denied"),  # no flush
        (b"\x1f\x8b\x08\x00compressed", ("Content-Encoding: gzip",), "git_push_denied"),
        (
            pkt(COMMAND + b"\0 report-status\n") + b"0000" + b"PACK" * 100_000,
            (CHUNKED,),
            "ng refs/heads/main",
        ),
        (pkt(COMMAND + b"\n") * 1000, (CHUNKED,), "git_push_denied"),  # past the bound
        (b"0000" + b"PACK" * 1000, (CHUNKED,), "git_push_denied"),  # no command, a pack
    ],
    ids=[
        "forged-main",
        "not-pkt-lines",
        "no-flush",
        "compressed",
        "chunked-main",
        "chunked-unbounded",
        "chunked-empty-list",
    ],
)
def test_a_forged_command_list_from_curl_is_refused(
    git_server: GitServer,
    client: tuple[Client, PrivateProxy],
    body: bytes,
    headers: tuple[str, ...],
    expected: str,
) -> None:
    c, p = client
    seen = len(git_server.requests())
    status, text = curl(c, p, body, *headers)
    assert expected in text, text
    assert status in (200, 403)
    assert not any(r.startswith("POST") for r in git_server.requests()[seen:])
