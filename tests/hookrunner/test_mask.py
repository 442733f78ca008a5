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

from sandbox_egress.hookrunner.enforce import mask
from sandbox_egress.hookrunner.enforce.contain import Credentials
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool

NOBODY = 65534
SECRET = "API_KEY=sk-live-do-not-leak-123"
READERS = (
    "cat .env; cat conf/.ENV.production; "
    "grep -r sk-live . ; "
    "tar cf - . 2>/dev/null | strings | grep sk-live; "
    "python3 -c 'print(open(\".env\").read())'; "
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
    assert mask.protected_files(tmp_path, limit=1) in ([], [str(tmp_path / ".env")])


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
    monkeypatch.setattr(mask, "has_capability", lambda bit: False)
    user = Credentials(NOBODY, NOBODY, "nobody")
    assert mask.masked(["bash", "-c", "x"], tmp_path, user) == (["bash", "-c", "x"], user)


def test_the_prefix_masks_then_drops_to_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(tmp_path)
    monkeypatch.setattr(mask, "has_capability", lambda bit: True)
    monkeypatch.setattr(mask.shutil, "which", lambda name, path=None: f"/sbin/{name}")
    argv, user = mask.masked(["bash", "-c", "x"], tmp_path, Credentials(NOBODY, NOBODY, "nobody"))
    assert user is None
    assert argv == [
        "/sbin/unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        mask.SCRIPT,
        "hookrunner-mask",
        "/sbin/mount",
        "2",
        str(tmp_path / ".env"),
        str(tmp_path / "conf" / ".ENV.production"),
        "/sbin/setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        "--",
        "bash",
        "-c",
        "x",
    ]
    assert mask.masked(["bash"], tmp_path / "conf" / "settings.py", None) == (
        ["bash"],
        None,
    )  # no files


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
