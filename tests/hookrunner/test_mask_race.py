"""A name swapped between the mask walk and the mount (D438): a background run of an earlier
Bash call (it outlives the call in ``fire``) or a parallel call renames the directory that
holds a ``.env`` and puts another in its place. The mask must then refuse the call, never
land on the other file and leave the real one readable."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import mask, toolns

# A mount namespace needs root (or user namespaces): `make test-unit` runs without
# capabilities and deselects these; `make test` runs them as root.
pytestmark = pytest.mark.privileged


def plant(root: Path) -> None:
    (root / "a").mkdir()
    (root / "a" / ".env").write_text("SECRET=hunter2\n")
    (root / "decoy").mkdir()
    (root / "decoy" / ".env").write_text("DECOY=1\n")


def swap(root: Path) -> None:
    """``a`` becomes the decoy; the real directory is parked at ``.p``."""
    os.rename(root / "a", root / ".p")
    os.rename(root / "decoy", root / "a")


def test_a_swap_after_the_walk_refuses_instead_of_masking_the_decoy(tmp_path: Path) -> None:
    plant(tmp_path)
    found = mask.protected_identities(tmp_path)
    assert sorted(found) == [str(tmp_path / "a" / ".env"), str(tmp_path / "decoy" / ".env")]
    swap(tmp_path)  # a/.env is now the decoy's file; the real one is .p/.env
    checked = [("/dev/null", path, identity) for path, identity in sorted(found.items())]
    script = f"cat {tmp_path}/.p/.env; echo ran"
    argv, _, made = toolns.tool_namespace(
        ["/bin/sh", "-c", script], [], None, {"PATH": "/usr/bin:/bin"}, lasting=True,
        checked=checked,
    )  # fmt: skip
    assert made
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 125
    assert done.stdout == ""
    assert f"hookrunner boundary: {tmp_path}/a/.env changed before it was masked" in done.stderr


def test_the_masks_land_where_nothing_moved(tmp_path: Path) -> None:
    plant(tmp_path)
    found = mask.protected_identities(tmp_path)
    checked = [("/dev/null", path, identity) for path, identity in sorted(found.items())]
    argv, _, _ = toolns.tool_namespace(
        ["/bin/sh", "-c", f"cat {tmp_path}/a/.env {tmp_path}/decoy/.env; echo ran"], [], None,
        {"PATH": "/usr/bin:/bin"}, lasting=True, checked=checked,
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")


def test_a_swap_during_the_walk_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plant(tmp_path)
    real_open = os.open

    def opening(path: str, flags: int, *args: int) -> int:
        if path == str(tmp_path / "a"):
            swap(tmp_path)  # after the top was listed, before "a" is read
        return real_open(path, flags, *args)

    monkeypatch.setattr(mask.os, "open", opening)
    with pytest.raises(mask.MaskIncomplete, match=r"/a changed while its \.env files were"):
        mask.protected_identities(tmp_path)
