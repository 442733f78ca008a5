"""Real git repositories for the git guard's and the boundary's tests (issues 31 and 44).

`diverged_clone`: a bare remote and a clone whose `main` was amended after it was
pushed, so pushing `main` again forces. `make_repos` is that clone given to the tool
user `nobody` (the remote has `main` and `keep`), `tool` runs a ``code_execution``
tool as `nobody` in it (root only), `refs` lists the remote's refs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from sandbox_egress.common.contain import Credentials
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool

NOBODY = Credentials(65534, 65534, "nobody")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}


def git(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip()


def diverged_clone(
    top: Path, work: Path, remote: Path, *pushed: str, env: Mapping[str, str] | None = None
) -> None:
    """`remote` (bare) holding `pushed` of the clone `work`, whose `main` is amended since."""
    git(top, "init", "-q", "--bare", "-b", "main", str(remote), env=env)
    git(top, "init", "-q", "-b", "main", str(work), env=env)
    for key, value in (("user.email", "a@example.test"), ("user.name", "a")):
        git(work, "config", key, value, env=env)
    (work / "f").write_text("1\n")
    git(work, "add", "f", env=env)
    git(work, "commit", "-qm", "one", env=env)
    git(work, "remote", "add", "origin", str(remote), env=env)
    git(work, "push", "-q", "origin", *pushed, env=env)
    git(work, "commit", "-q", "--amend", "-m", "diverged", env=env)  # main needs a force now


def make_repos(top: Path) -> tuple[Path, Path]:
    """The remote has main and keep; the clone's main is amended, so pushing it forces."""
    top.chmod(0o755)
    remote, work = top / "remote.git", top / "ws"
    diverged_clone(top, work, remote, "main", "main:keep")
    for path in (top, *top.rglob("*")):
        os.chown(path, NOBODY.uid, NOBODY.gid, follow_symlinks=False)
    return work, remote


def refs(remote: Path) -> str:
    return git(remote, "for-each-ref", "--format=%(refname) %(objectname)")


def tool(work: Path, code: str, env: dict[str, str] | None = None) -> tuple[bool, str, str]:
    result = run_tool(
        "code_execution",
        {"code": code},
        workspace=Workspace(work),
        env=ENV if env is None else env,
        timeout=60,
        user=NOBODY,
    )
    return result.ok, result.output, result.error or ""
