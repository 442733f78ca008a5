"""End to end, git pushes of any size (docs/configuration.md#git-over-https, D180-D184):
a real `git push` of 50 MiB of random files, which git sends chunked, through the real
proxy to `git http-backend`: allowed to `refs/heads/agent/**` it lands with the right
commit and is spent from the upload budget; refused to `main`, git prints the reason and
the bare repository is unchanged (refs and object counts). Over HTTP/2 (curl, to an
HTTP/2-only upstream that logs each head as it arrives) a refused push sends not even
its head. Fixtures: tests/e2e/test_git_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.proxy.clauses.git import pkt
from testbed import procs
from testbed.harness import JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy
from tests.e2e.test_git_e2e import (
    CHUNKED,
    HOST,
    Client,
    GitServer,
    client,
    clone_and_commit,
    git,
    git_server,
)

pytestmark = pytest.mark.netns
__all__ = ["client", "git_server"]  # fixtures, used by name

LARGE_MIB = 50  # random, so the pack is as large: git sends it chunked (over http.postBuffer)


def large_commit(c: Client, repo: str) -> Path:
    work = clone_and_commit(c, repo)
    for i in range(LARGE_MIB // 10):
        (work / f"blob-{i}").write_bytes(os.urandom(10 * 1024 * 1024))
    assert c.run("add", ".", cwd=work).returncode == 0
    assert c.run("commit", "-qm", "large", cwd=work).returncode == 0
    return work


def objects(server: GitServer, repo: str) -> str:
    """The bare repository's refs and object counts (loose and packed)."""
    counts = git(["count-objects", "-v"], server.root / repo)
    kept = [line for line in counts.splitlines() if line.split(":")[0] in ("count", "in-pack")]
    return server.heads(repo) + "\n".join(kept)


def upload_left(p: PrivateProxy) -> float:
    samples = p.process.scrape()
    return samples[("egress_budget_remaining", (("budget", "upload"), ("rule", HOST)))]


@pytest.mark.slow  # about 10-30 s: 50 MiB generated, committed, packed and sent
def test_a_50_mib_push_is_judged_by_ref_streamed_on_and_spent_from_the_budget(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, p = client
    work = large_commit(c, "acme/web")
    head = c.run("rev-parse", "HEAD", cwd=work).stdout.strip()
    seen = len(git_server.requests())
    started = time.monotonic()
    done = c.run("push", "origin", "HEAD:refs/heads/agent/large", cwd=work)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    print(f"50 MiB push through the proxy: {took:.1f} s")
    assert f"refs/heads/agent/large {head}" in git_server.heads("acme/web.git")
    git(["cat-file", "-e", f"{head}:blob-0"], git_server.root / "acme/web.git")
    posts = [r for r in git_server.requests()[seen:] if r.startswith("POST")]
    assert posts[-1].endswith("git-receive-pack chunked"), posts  # streamed, not held
    # The push was spent from the upload budget (the gauge is read at the next request).
    assert c.run("ls-remote", "origin", cwd=work).returncode == 0
    assert upload_left(p) < 1024**3 - 0.95 * LARGE_MIB * 1024**2  # the pack, random bytes


@pytest.mark.slow  # about 10-30 s: 50 MiB generated, committed, packed and sent
def test_a_50_mib_push_to_main_is_refused_with_the_reason_and_lands_nothing(
    git_server: GitServer, client: tuple[Client, PrivateProxy]
) -> None:
    c, p = client
    work = large_commit(c, "acme/web")
    before = objects(git_server, "acme/web.git")
    seen = len(git_server.requests())
    started = time.monotonic()
    done = c.run("push", "origin", "HEAD:refs/heads/main", cwd=work)
    print(f"50 MiB push refused through the proxy: {time.monotonic() - started:.1f} s")
    assert done.returncode != 0
    assert "[remote rejected] HEAD -> main (egress policy: this ref may not be pushed)" in (
        done.stderr
    )
    assert objects(git_server, "acme/web.git") == before
    # Only git's probe (a lone flush packet, 4 bytes) reached the server, never the push.
    posts = [r for r in git_server.requests()[seen:] if r.startswith("POST")]
    assert all(r.endswith("git-receive-pack 4") for r in posts), posts
    refused = [a for a in p.view.audit_log.all() if a["reason"] == "git_push_denied"]
    assert refused and refused[-1]["bytes_sent"] == 0


H2_PORT = 9447  # an HTTP/2-only upstream (testbed/h2_echo.py); git's own server is HTTP/1.1


@pytest.fixture(scope="module")
def h2_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "git-h2-echo.jsonl", e2e_dir / "git-h2-echo.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.h2_echo", "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{H2_PORT}", "--alpn", "h2", "--log-heads",
    ]  # fmt: skip
    child = procs.start("git-h2-upstream", argv, e2e_dir)
    try:
        procs.wait_until("h2 upstream ready", ready.exists, timeout=15, child=child)
        yield JsonLines(log)
    finally:
        child.stop()


@pytest.mark.parametrize(("ref", "expected"), [("agent/h2", "200 2"), ("main", "200 2")])
def test_a_push_over_http2_is_judged_alike(
    h2_upstream: JsonLines, client: tuple[Client, PrivateProxy], ref: str, expected: str
) -> None:
    c, p = client
    seen = len(h2_upstream.all())
    command = b"0" * 40 + b" " + b"1" * 40 + b" refs/heads/" + ref.encode()
    body = pkt(command + b"\0 report-status\n") + b"0000" + b"PACK" * 100_000
    url = f"https://{HOST}:{H2_PORT}/acme/web.git/git-receive-pack"
    argv = ["curl", "-s", "--http2", "-o", "/dev/stderr", "-w", "%{http_code} %{http_version}",
            "--cacert", str(p.view.proxy_ca), "-x", c.env["https_proxy"], "--data-binary", "@-",
            "-H", "Content-Type: application/x-git-receive-pack-request", "-H", CHUNKED, url]  # fmt: skip
    done = subprocess.run(argv, input=body, capture_output=True, timeout=60)
    assert done.stdout.decode() == expected
    arrived = [e for e in h2_upstream.all()[seen:] if e["event"] in ("head", "request")]
    if ref == "main":
        assert b"ng refs/heads/main egress policy: this ref may not be pushed" in done.stderr
        assert arrived == []  # not even the head
    else:
        assert [e["event"] for e in arrived] == ["head", "request"]
        assert arrived[1]["body_len"] == len(body)
