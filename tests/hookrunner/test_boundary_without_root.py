"""The same boundary without root: an unprivileged user namespace (issue 31, D190, D194).

A runner that is not root makes the tool's namespace inside an unprivileged
user namespace. Here the runner's part is played by the user ``nobody``: the
argv ``toolns`` builds for such a runner (``unshare --user --map-root-user``,
the binds, the read-only remounts, every capability dropped) is started as
``nobody``, with a guard whose directory ``nobody`` owns, as a non-root
runner's would be. (The runner itself cannot be started as ``nobody`` here:
its interpreter lives under ``/root``. A runner with root's uid but no
capability cannot map itself into a user namespace since Linux 5.12, so that
is not a stand-in.) Real git, a real bare repository, real bash: the
force-push spellings are stopped, the ``.env`` files (one a symlink to a
shared file outside the workspace) read as empty, the tool cannot unmount or
rewrite the guard. The root runner's pre hooks are told ``HOOK_BOUNDARY``,
and without any namespace the runner says so once and tells the packs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import mask, toolns
from sandbox_egress.hookrunner.report import WarningKind
from sandbox_egress.hookrunner.session import HookSession
from tests.hookrunner.gitrepos import diverged_clone, git
from tests.hookrunner.helpers import HOOKRUNNER

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
SECRET = "API_KEY=sk-live-do-not-leak-123"


@pytest.fixture
def top() -> Iterator[Path]:
    """remote.git (main ahead of the clone's), ws (the clone, with .env files), hooks.json."""
    top = Path(tempfile.mkdtemp(prefix="hr-userns-"))
    try:
        top.chmod(0o755)
        work = top / "ws"
        diverged_clone(top, work, top / "remote.git", "main")
        (work / ".env").write_text(SECRET + "\n")
        (top / "shared").mkdir()
        (top / "shared" / ".env").write_text(SECRET + "\n")
        (work / "deploy.env").symlink_to(top / "shared" / ".env")
        record = f'printf %s "${{HOOK_BOUNDARY-unset}}" > {top}/boundary'
        hooks = {"g": {"pre_tool_execution": [{"hooks": [{"type": "command", "command": record}]}]}}
        (top / "hooks.json").write_text(json.dumps(hooks))
        for path in (top, *top.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        yield top
    finally:
        shutil.rmtree(top)


@pytest.fixture
def guard() -> Iterator[toolns.Guard]:
    """A guard made as a non-root runner's: its directory and files owned by that runner."""
    made = toolns._make_guard("/usr/bin:/bin")
    assert made is not None
    try:
        for path in (made.directory, *Path(made.directory).iterdir()):
            os.chown(path, NOBODY, NOBODY)
        yield made
    finally:
        shutil.rmtree(made.directory)


def unprivileged() -> toolns.Programs:
    names = [
        shutil.which(n, path="/usr/sbin:/usr/bin:/sbin:/bin")
        for n in ("unshare", "mount", "setpriv")
    ]
    unshare, mount, setpriv = names
    assert unshare and mount and setpriv
    return toolns.Programs(unshare, mount, setpriv, unprivileged=True)


def as_non_root_runner(top: Path, guard: toolns.Guard, code: str) -> tuple[int, str, str]:
    work = top / "ws"
    binds = [*guard.binds(), *(("/dev/null", p) for p in mask.protected_files(work))]
    argv = toolns.namespace_argv(
        ["bash", "-c", code], binds, guard.read_only(), None, unprivileged(), guard
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(top), "LANG": "C.UTF-8"}
    done = subprocess.run(
        [*AS_NOBODY, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.privileged
def test_a_non_root_runner_can_make_the_namespace() -> None:
    done = subprocess.run([*AS_NOBODY, *toolns.probe_argv(unprivileged())], timeout=30)
    assert done.returncode == 0


FORCED = {
    "eval": 'c="git pu"; eval "${c}sh -f origin main"',
    "here-document | sh": "cat <<'EOF' | sh\ngit push --force origin main\nEOF",
    "alias --config-env": "P=push git --config-env=alias.p=P p origin +main",
    "mirror --m": "git push --m origin",
    "deletion": "git push origin :main",
}


@pytest.mark.privileged
@pytest.mark.parametrize("code", FORCED.values(), ids=FORCED.keys())
def test_a_force_push_is_stopped_without_root(top: Path, guard: toolns.Guard, code: str) -> None:
    before = git(top / "remote.git", "rev-parse", "main")
    status, output, error = as_non_root_runner(top, guard, code)
    assert git(top / "remote.git", "rev-parse", "main") == before
    assert "git guard (hookrunner)" in error, (status, output, error)


@pytest.mark.privileged
def test_env_files_are_masked_and_the_boundary_holds_without_root(
    top: Path, guard: toolns.Guard
) -> None:
    code = (  # never a write outside the namespace: stop unless git is the guard's mount
        "grep -q ' /usr/bin/git ' /proc/self/mountinfo || exit 99; "
        "cat .env deploy.env ../shared/.env; "
        "umount /usr/bin/git 2>/dev/null || echo no-umount; "
        f'echo "exit 0" > {guard.directory}/gitguard.py 2>/dev/null || echo guard-read-only; '
        "echo x > /usr/bin/git 2>/dev/null || echo wrapper-read-only; "
        "unshare -rm sh -c 'umount /usr/bin/git' 2>/dev/null || echo no-nested-umount; "
        "git push -f origin main 2>&1 | grep -c 'git guard'; "
        "git log --format=%s -1; echo end"
    )
    status, output, error = as_non_root_runner(top, guard, code)
    expected = "no-umount\nguard-read-only\nwrapper-read-only\nno-nested-umount\n1\ndiverged\nend\n"
    assert (status, output) == (0, expected), error
    assert f"{guard.directory}/gitguard.py: Read-only file system" in error
    assert (top / "ws" / ".env").read_text() == SECRET + "\n"
    assert (Path(guard.directory) / "gitguard.py").read_text().startswith('"""The exec-time')


@pytest.mark.privileged
def test_the_root_runner_tells_its_pre_hooks_the_boundary(top: Path) -> None:
    argv = [HOOKRUNNER, "exec", "code_execution", "--workspace", str(top / "ws")]
    argv += ["--system-config", str(top / "hooks.json")]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(top), "HOOK_BOUNDARY": "forged"}
    done = subprocess.run(
        argv,
        input=json.dumps({"code": "cat .env; echo end"}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert json.loads(done.stdout) == {"status": "ok", "output": "end\n"}, done.stderr
    assert (top / "boundary").read_text() == "git,mask"
    assert "kind=boundary" not in done.stderr


def test_without_any_namespace_the_runner_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(toolns, "_probed", [None])
    (tmp_path / "system.json").write_text("{}")
    session = HookSession(
        tmp_path,
        system_config=tmp_path / "system.json",
        environ={},
        stream=Stream(),  # type: ignore[arg-type]
    )
    assert session.check_boundary() == toolns.boundary_problem()
    said = [line for line in "".join(lines).splitlines() if "kind=boundary" in line]
    assert len(said) == 1
    assert "git is not guarded and .env files are not masked" in said[0]
    assert session._boundary("code_execution") == ""  # the packs are told nothing: fail closed
    assert WarningKind.BOUNDARY == "boundary"
