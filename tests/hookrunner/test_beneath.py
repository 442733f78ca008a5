"""``hookrunner.enforce.beneath``: opening below a directory without following symlinks, both walks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce import beneath
from sandbox_egress.hookrunner.enforce.beneath import RaceError, open_beneath, open_directory


@pytest.fixture(params=["openat2", "component-wise"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "component-wise":
        monkeypatch.setattr(beneath, "_openat2_works", False)
    else:
        assert beneath.has_openat2()
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[int]:
    (tmp_path / "ws" / "dir").mkdir(parents=True)
    (tmp_path / "ws" / "dir" / "f.txt").write_text("inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text("OUTSIDE")
    (tmp_path / "ws" / "out").symlink_to(tmp_path / "outside")
    (tmp_path / "ws" / "rel").symlink_to("dir")
    (tmp_path / "ws" / "file_link").symlink_to("dir/f.txt")
    fd = os.open(tmp_path / "ws", os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def read(fd: int) -> str:
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode()


def test_opens_a_resolved_path(root: int, walk: str) -> None:
    assert read(open_beneath(root, ["dir", "f.txt"], os.O_RDONLY)) == "inside"


@pytest.mark.parametrize("parts", [["out", "f.txt"], ["rel", "f.txt"], ["file_link"], ["out"]])
def test_any_symlink_on_the_way_is_a_race(root: int, walk: str, parts: list[str]) -> None:
    with pytest.raises(RaceError) as caught:
        os.close(open_beneath(root, parts, os.O_RDONLY))
    assert str(caught.value).startswith("[Errno")
    assert "a path component changed while it was opened" in str(caught.value)


@pytest.mark.parametrize("parts", [["..", "outside"], ["dir", "..", "out"], [""], ["a/b"]])
def test_unresolved_parts_are_a_programming_error(root: int, parts: list[str]) -> None:
    with pytest.raises(ValueError, match="not a resolved relative path"):
        open_beneath(root, parts, os.O_RDONLY)


def test_open_directory_creates_missing_directories(root: int, walk: str) -> None:
    fd = open_directory(root, ["dir", "new", "deeper"], create=True)
    try:
        assert os.listdir(fd) == []
        assert os.path.isdir(f"/proc/self/fd/{root}/dir/new/deeper")
    finally:
        os.close(fd)


def test_open_directory_refuses_a_symlink_even_when_creating(root: int, walk: str) -> None:
    with pytest.raises(RaceError):
        open_directory(root, ["out", "x"], create=True)
    assert not os.path.exists(f"/proc/self/fd/{root}/out/x")


def test_a_fifo_opens_without_blocking(root: int, walk: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ws" / "dir" / "pipe")
    fd = open_beneath(root, ["dir", "pipe"], os.O_RDONLY)
    try:
        assert os.get_blocking(fd) is False
    finally:
        os.close(fd)
    with pytest.raises(OSError) as caught:  # a writer without a reader: ENXIO, not a hang
        open_beneath(root, ["dir", "pipe"], os.O_WRONLY)
    assert caught.value.errno == 6
