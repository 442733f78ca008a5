"""End to end, the exec-time git guard and the proxy's git rules together (issue 44, D370-D375).

The agent's `git` runs as a `code_execution` tool (as `nobody`, in its namespace, through
the guard's broker) and pushes over HTTPS through the real proxy to `git http-backend`
(testbed/git_server.py; fixtures of tests/e2e/test_git_e2e.py). The proxy allows
`refs/heads/agent/**` of acme/web and cannot tell a force from a fast-forward; the
guard can: a fast-forward to an agent branch lands, a forced update of one (which the
proxy alone would let through) is refused by the guard and no receive-pack request
reaches the server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.common.contain import Credentials
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool
from tests.e2e.conftest import PrivateProxy
from tests.e2e.test_git_e2e import Client, GitServer, client, git_server

__all__ = ["client", "git_server"]  # fixtures, used by name
pytestmark = pytest.mark.netns

NOBODY = Credentials(65534, 65534, "nobody")


@pytest.fixture
def workspace(client: tuple[Client, PrivateProxy]) -> Iterator[tuple[Path, dict[str, str]]]:
    """A clone of acme/web owned by nobody, one commit ahead, and the tool's environment."""
    c, _ = client
    top = Path(tempfile.mkdtemp(prefix="hr-gitguard-e2e-"))
    try:
        top.chmod(0o755)
        ca = top / "proxy-ca.pem"
        shutil.copyfile(c.env["GIT_SSL_CAINFO"], ca)
        ca.chmod(0o644)
        work = top / "ws"
        assert c.run("clone", "-q", c.url("acme/web"), str(work)).returncode == 0
        (work / "change").write_text("agent work\n")
        assert c.run("add", "change", cwd=work).returncode == 0
        assert c.run("commit", "-qm", "agent", cwd=work).returncode == 0
        for path in (work, *work.rglob("*")):
            os.chown(path, NOBODY.uid, NOBODY.gid, follow_symlinks=False)
        env = {
            "PATH": "/usr/bin:/bin", "HOME": str(top), "LANG": "C.UTF-8",
            "https_proxy": c.env["https_proxy"], "GIT_SSL_CAINFO": str(ca),
            "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1",
        }  # fmt: skip
        yield work, env
    finally:
        shutil.rmtree(top)


def tool(work: Path, env: dict[str, str], code: str) -> tuple[bool, str, str]:
    result = run_tool(
        "code_execution",
        {"code": code},
        workspace=Workspace(work),
        env=env,
        timeout=120,
        user=NOBODY,
    )
    return result.ok, result.output, result.error or ""


def test_a_fast_forward_lands_and_a_force_the_proxy_allows_is_refused_by_the_guard(
    git_server: GitServer, workspace: tuple[Path, dict[str, str]]
) -> None:
    work, env = workspace
    ok, output, error = tool(work, env, "git push -q origin HEAD:refs/heads/agent/guarded")
    head = tool(work, env, "git rev-parse HEAD")[1].strip()
    assert ok, (output, error)
    assert f"refs/heads/agent/guarded {head}" in git_server.heads("acme/web.git")

    before = git_server.heads("acme/web.git")
    seen = len(git_server.requests())
    code = "git commit -q --amend -m diverged; git push -q -f origin HEAD:refs/heads/agent/guarded"
    env_with_author = {**env, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a"}
    env_with_author |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    ok, output, error = tool(work, env_with_author, code)
    assert not ok
    assert "git guard (hookrunner): a forced push" in error, (output, error)
    assert git_server.heads("acme/web.git") == before
    posts = [r for r in git_server.requests()[seen:] if r.startswith("POST")]
    assert not any("receive-pack" in r for r in posts), posts
