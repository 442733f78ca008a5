"""Protected files masked in the tool's own mount namespace (issue 20, D93).

The privileged tests run real ``code_execution`` tools as root and as
``nobody``: ``cat``, ``grep -r``, ``tar | strings`` and ``python3 -c`` read
nothing of a planted ``.env``, while the file keeps its content outside and no
mount is left behind. The others check the pure parts without root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.common.contain import Credentials
from sandbox_egress.hookrunner.enforce import mask, toolns
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool

NOBODY = 65534
SECRET = "API_KEY=sk-live-do-not-leak-123"
READERS = (
    "cat .env; cat conf/.ENV.production; "
    "grep -r sk-live . ; "
    "tar cf - . 2>/dev/null | strings | grep sk-live; "
    "python3 -c 'print(open(\".env\").read())'; "
    "(shopt -s dotglob; cat *env); (GLOBIGNORE=x; cat *env); "  # round three (issue 31)
    "c='ca'; eval \"${c}t .e\"\"nv\"; printf 'cat .env\\n' | sh; "
    "trap 'cat .env' EXIT; "
    "echo done"
)


def plant(root: Path) -> None:
    (root / ".env").write_text(SECRET + "\n")
    (root / "conf").mkdir()
    (root / "conf" / ".ENV.production").write_text(SECRET + "\n")
    (root / "conf" / "settings.py").write_text("DEBUG = True\n")
    (root / ".envrc").write_text("use nix\n")
    (root / ".env.d").mkdir()  # a directory of that name is not masked (not a file)
    (root / "link").symlink_to(".env")


def test_protected_files_are_the_packs_names(tmp_path: Path) -> None:
    plant(tmp_path)
    assert mask.protected_files(tmp_path) == [
        str(tmp_path / ".env"),
        str(tmp_path / "conf" / ".ENV.production"),
    ]
    with pytest.raises(mask.MaskIncomplete):  # never a partial list
        mask.protected_files(tmp_path, limit=1)


@pytest.mark.parametrize(
    ("name", "protected"),
    [
        (".env", True),
        (".ENV", True),
        (".env.local", True),
        (".envrc", False),
        ("prod.env", False),
        ("env", False),
    ],
)
def test_protected_name(name: str, protected: bool) -> None:
    assert mask.protected_name(name) is protected


def test_without_root_nothing_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plant(tmp_path)
    monkeypatch.setattr(toolns, "_probed", [None])  # neither namespace can be made
    user = Credentials(NOBODY, NOBODY, "nobody")
    binds = [("/dev/null", str(tmp_path / ".env"))]
    assert toolns.tool_namespace(["bash", "-c", "x"], binds, user, {}) == (
        ["bash", "-c", "x"],
        user,
        False,
    )
    assert toolns.boundary({}) == ""
    assert "git is not guarded and .env files are not masked" in (toolns.boundary_problem() or "")


def test_the_prefix_mounts_then_drops_to_the_user(tmp_path: Path) -> None:
    tools = toolns.Programs("/sbin/unshare", "/sbin/mount", "/sbin/setpriv", unprivileged=False)
    binds = [("/dev/null", str(tmp_path / ".env")), ("/g", "/usr/bin/git")]
    user = Credentials(NOBODY, NOBODY, "n")
    argv = toolns.namespace_argv(["bash", "-c", "x"], binds, ["/usr/bin/git"], user, tools)
    assert argv == [
        "/sbin/unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        toolns.SCRIPT,
        "hookrunner-ns",
        "/sbin/mount",
        toolns.STAT,
        "0",  # nothing kept read-only (D435)
        "2",
        "/dev/null",
        str(tmp_path / ".env"),
        "/g",
        "/usr/bin/git",
        "0",  # no checked mask (D438)
        "0",  # no fresh tmpfs, no broker: no guard given
        "-",
        "1",
        "/usr/bin/git",
        "/sbin/setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--",
        "bash",
        "-c",
        "x",
    ]


def test_without_root_a_user_namespace_and_no_capability_after(tmp_path: Path) -> None:
    tools = toolns.Programs("/u", "/m", "/s", unprivileged=True)
    argv = toolns.namespace_argv(["bash"], [("/dev/null", "/w/.env")], [], None, tools)
    assert argv == [
        "/u",
        "--user",
        "--map-root-user",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        toolns.SCRIPT,
        "hookrunner-ns",
        "/m",
        toolns.STAT,
        "0",  # nothing kept read-only (D435)
        "1",
        "/dev/null",
        "/w/.env",
        "0",  # no checked mask (D438)
        "0",
        "-",
        "0",
        "/s",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--",
        "bash",
    ]


def test_a_symlink_s_target_and_hard_links_are_masked(tmp_path: Path) -> None:
    outside, workspace = tmp_path / "shared", tmp_path / "ws"
    outside.mkdir()
    workspace.mkdir()
    (outside / ".env").write_text(SECRET)
    (outside / "production.conf").write_text(SECRET)
    (workspace / ".env").symlink_to(outside / ".env")  # Capistrano's shared .env
    (workspace / "alias").symlink_to(outside / ".env")  # reaches a protected name
    (workspace / ".env.prod").symlink_to(outside / "production.conf")
    (workspace / ".env.dir").symlink_to(outside)  # a directory: nothing to mask
    (workspace / "dangling").symlink_to(outside / ".env.gone")
    (workspace / ".env.local").write_text(SECRET)
    os.link(workspace / ".env.local", workspace / "notes.txt")
    assert mask.protected_files(workspace) == sorted(
        [
            str(outside / ".env"),
            str(outside / "production.conf"),
            str(workspace / ".env.local"),
            str(workspace / "notes.txt"),
        ]
    )


def test_a_walk_that_cannot_finish_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(30):
        (tmp_path / f"f{index}").write_text("x")
    with pytest.raises(mask.MaskIncomplete, match="more than 29 entries"):
        mask.protected_files(tmp_path, limit=29)
    assert mask.protected_files(tmp_path, limit=30) == []
    (tmp_path / "locked").mkdir()
    real_scandir = os.scandir

    def scandir(path: int) -> Iterator[os.DirEntry[str]]:  # root reads every mode: mocked
        if os.readlink(f"/proc/self/fd/{path}").endswith("locked"):  # read by descriptor
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(mask.os, "scandir", scandir)
    with pytest.raises(mask.MaskIncomplete, match="cannot read .*locked: Permission denied"):
        mask.protected_files(tmp_path)


def test_a_call_is_refused_when_the_walk_cannot_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(SECRET)
    monkeypatch.setattr(mask.protected_files, "__defaults__", (0,))
    result = run_tool(
        "code_execution",
        {"code": "cat .env"},
        workspace=Workspace(tmp_path),
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert (result.ok, result.output) == (False, "")
    assert result.error == (
        f"code_execution: refused: the .env files cannot all be masked (more than 0 entries below "
        f"{tmp_path})"
    )


@pytest.fixture
def open_ws() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="hr-mask-"))
    try:
        top.chmod(0o755)
        workspace = top / "ws"
        workspace.mkdir()
        plant(workspace)
        for path in (workspace, *workspace.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        yield workspace
    finally:
        shutil.rmtree(top)


def mounts_on(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as info:
        return [line for line in info if f" {path}" in line]


@pytest.mark.privileged
@pytest.mark.parametrize(
    "user", [Credentials(NOBODY, NOBODY, "nobody"), None], ids=["nobody", "root"]
)
def test_tools_read_nothing_of_a_protected_file(open_ws: Path, user: Credentials | None) -> None:
    result = run_tool(
        "code_execution",
        {"code": READERS},
        workspace=Workspace(open_ws),
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        timeout=30,
        user=user,
    )
    assert result.output.endswith("done\n"), result
    assert "sk-live" not in result.output + (result.error or "")
    assert (open_ws / ".env").read_text() == SECRET + "\n"  # untouched outside the tool
    assert mounts_on(open_ws) == []


@pytest.mark.privileged
def test_the_tool_user_cannot_unmount(open_ws: Path) -> None:
    code = "umount .env 2>/dev/null; unshare -rm sh -c 'umount .env; cat .env' 2>/dev/null; cat .env; echo end"
    result = run_tool(
        "code_execution",
        {"code": code},
        workspace=Workspace(open_ws),
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
        user=Credentials(NOBODY, NOBODY, "nobody"),
    )
    assert result.output == "end\n", result


@pytest.mark.privileged
def test_an_ordinary_tool_run_is_unchanged(open_ws: Path) -> None:
    result = run_tool(
        "code_execution",
        {"code": "id -u; cat conf/settings.py; echo x > out.txt; cat out.txt"},
        workspace=Workspace(open_ws),
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
        user=Credentials(NOBODY, NOBODY, "nobody"),
    )
    assert (result.ok, result.output) == (True, f"{NOBODY}\nDEBUG = True\nx\n")


@pytest.mark.privileged
def test_a_symlinked_env_outside_and_a_created_env_are_masked(open_ws: Path) -> None:
    shared = open_ws.parent / "shared"
    shared.mkdir()
    (shared / ".env").write_text(SECRET + "\n")
    os.chown(shared / ".env", NOBODY, NOBODY)
    (open_ws / "deploy.env").symlink_to(shared / ".env")
    os.lchown(open_ws / "deploy.env", NOBODY, NOBODY)

    def call(code: str) -> str:
        user = Credentials(NOBODY, NOBODY, "nobody")
        env = {"PATH": "/usr/bin:/bin"}
        result = run_tool(
            "code_execution",
            {"code": code},
            workspace=Workspace(open_ws),
            env=env,
            timeout=30,
            user=user,
        )
        return result.output + (result.error or "")

    assert call(f"cat deploy.env {shared}/.env; echo end") == "end\n"
    assert (shared / ".env").read_text() == SECRET + "\n"
    # a .env one call writes is masked in the next: a later call cannot read it back
    assert (
        call(f"echo {SECRET} > sub.env.tmp; mkdir -p app; mv sub.env.tmp app/.env; echo ok")
        == "ok\n"
    )
    assert call("cat app/.env; echo end") == "end\n"
    moves = "mv app/.env moved 2>/dev/null || echo busy; ln app/.env hard 2>/dev/null || echo xdev"
    assert call(moves) == "busy\nxdev\n"  # a masked file can be neither renamed nor linked
    assert (open_ws / "app" / ".env").read_text() == SECRET + "\n"
