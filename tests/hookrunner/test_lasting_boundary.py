"""The namespace ``fire``'s boundary makes (``toolns.namespace_argv(lasting=True)``, D381).

Without root (played by ``nobody``, as in test_boundary_without_root): an unprivileged
user namespace without a PID namespace, so a background run outlives the command, with
the masks and the guard as before and no capability to undo them. As root with no tool
user: uid 0 kept, every capability dropped, so a mask cannot be unmounted.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import mask, toolns
from testbed import procs
from tests.hookrunner.test_boundary_without_root import (  # noqa: F401 (fixtures)
    AS_NOBODY,
    SECRET,
    git,
    guard,
    top,
    unprivileged,
)


def test_lasting_drops_the_pid_namespace_and_root_s_capabilities() -> None:
    tools = unprivileged()
    argv = toolns.namespace_argv(["true"], [], [], None, tools, lasting=True)
    assert "--pid" not in argv and "--user" in argv
    assert "--pid" in toolns.namespace_argv(["true"], [], [], None, tools)
    root = toolns.Programs(tools.unshare, tools.mount, tools.setpriv, unprivileged=False)
    argv = toolns.namespace_argv(["true"], [], [], None, root, lasting=True)
    assert argv[-6:] == [tools.setpriv, "--bounding-set=-all", "--inh-caps=-all",
                         "--ambient-caps=-all", "--", "true"]  # fmt: skip
    assert "--bounding-set=-all" not in toolns.namespace_argv(["true"], [], [], None, root)


@pytest.mark.privileged
def test_without_root_a_background_run_outlives_the_command_under_the_boundary(
    top: Path,  # noqa: F811
    guard: toolns.Guard,  # noqa: F811
) -> None:
    work = top / "ws"
    flag, out = top / "go", work / "bg.txt"
    code = (
        f"(while [ ! -e {flag} ]; do sleep 0.05; done; cat .env; "
        "git push -f origin main 2>&1 | grep -c 'git guard'; echo ran) > bg.txt 2>&1 & "
        "umount .env 2>/dev/null || echo no-umount"
    )
    binds = [*guard.binds(), *(("/dev/null", p) for p in mask.protected_files(work))]
    argv = toolns.namespace_argv(
        ["bash", "-c", code], binds, guard.read_only(), None, unprivileged(), guard, lasting=True
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(top), "LANG": "C.UTF-8"}
    before = git(top / "remote.git", "rev-parse", "main")
    done = subprocess.run([*AS_NOBODY, *argv], cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "no-umount\n"), done.stderr
    flag.touch()  # only now, after the command returned, does the background run go on
    assert procs.written(out, "ran\n") == "1\nran\n"
    assert git(top / "remote.git", "rev-parse", "main") == before
    assert (work / ".env").read_text() == SECRET + "\n"


@pytest.mark.privileged
def test_as_root_without_a_tool_user_the_mask_cannot_be_unmounted(top: Path) -> None:  # noqa: F811
    work = top / "ws"
    tools = unprivileged()
    root = toolns.Programs(tools.unshare, tools.mount, tools.setpriv, unprivileged=False)
    binds = [("/dev/null", p) for p in mask.protected_files(work)]
    code = "id -u; umount .env 2>/dev/null || echo no-umount; cat .env; echo end"
    argv = toolns.namespace_argv(["bash", "-c", code], binds, [], None, root, lasting=True)
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "0\nno-umount\nend\n"), done.stderr
