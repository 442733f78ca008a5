"""The boundary's per-call entry stays lean and isolated (D430-D431), and ``leanos`` keeps
the standard library's rules it stands in for."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.hookrunner.enforce import bound, leanos, toolns

# What the entry must not import: each costs a Bash call milliseconds of CPU (D430).
# (``pathlib`` is left to ``keep``, D435, which takes paths.)
HEAVY = ("subprocess", "dataclasses", "tempfile", "shutil", "shlex", "logging",
         "typing", "inspect", "base64", "ctypes", "site")  # fmt: skip


@pytest.mark.privileged  # a runner without capabilities probes user namespaces: subprocess
def test_the_entry_imports_nothing_heavy(tmp_path: Path) -> None:
    """What one call does before it runs the namespace: import, walk, probe, guard (as
    root, every `fire` Bash call's case; without root `toolns._probe` runs `unshare`)."""
    (tmp_path / ".env").write_text("A=1\n")
    probe = (
        "import os, sys; sys.path[:0] = sys.argv[1:2]; "
        f"import {bound.CALL}; from sandbox_egress.hookrunner.enforce import mask, toolns; "
        "mask.protected_files(sys.argv[2]); toolns.programs(); "
        "toolns.tool_namespace(['true'], [], None, os.environ, lasting=True); "
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, bound.package_root(), str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded = set(done.stdout.split())
    assert bound.CALL in loaded
    assert sorted(loaded & set(HEAVY)) == []


def test_the_wrapping_starts_python_without_site_and_isolated(tmp_path: Path) -> None:
    text = bound.shell_command("true", tmp_path)
    words = shlex.split(text.split("exec ", 2)[2].split(" 5<<<")[0])
    assert words[1:4] == ["-I", "-S", "-c"]
    assert words[4] == bound.BOOT
    assert words[5] == bound.package_root()
    assert bound.original(text) == "true"


def test_a_planted_package_on_pythonpath_or_in_the_directory_is_not_run(tmp_path: Path) -> None:
    """``-I`` keeps PYTHONPATH and the current directory off the path; only the runner's
    package root (the entry's own argument) comes first."""
    planted = tmp_path / "sandbox_egress"
    (planted / "hookrunner" / "enforce").mkdir(parents=True)
    for folder in (planted, planted / "hookrunner", planted / "hookrunner" / "enforce"):
        (folder / "__init__.py").write_text("")
    (planted / "hookrunner" / "enforce" / "boundcall.py").write_text(
        "import sys\ndef main(argv):\n    print('PLANTED')\n    return 0\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONSTARTUP": "/dev/null"}
    argv = [sys.executable, "-I", "-S", "-c", bound.BOOT, bound.package_root()]
    done = subprocess.run(
        [*argv, "--workspace", "/nonexistent-ws", bound.encode("true")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert "PLANTED" not in done.stdout
    assert done.returncode == 126
    assert "is not a directory" in done.stderr


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_quote_is_shlex_quote(word: str) -> None:
    assert leanos.quote(word) == shlex.quote(word)
    assert leanos.join([word, "a b"]) == shlex.join([word, "a b"])


def test_which_is_shutil_which(tmp_path: Path) -> None:
    first, second, directory = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (first, second, directory):
        folder.mkdir()
    (first / "tool").write_text("")  # not executable: skipped
    (second / "tool").write_text("#!/bin/sh\n")
    (second / "tool").chmod(0o755)
    (directory / "tool").mkdir()  # a directory: skipped
    (first / "link").symlink_to(second / "tool")
    path = os.pathsep.join(map(str, (directory, first, second)))
    for name in ("tool", "link", "missing", str(second / "tool"), str(first / "tool")):
        assert leanos.which(name, path) == shutil.which(name, path=path)


def test_remove_tree_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    tree = Path(leanos.make_temp_dir("hookrunner-test-"))
    assert oct(tree.stat().st_mode & 0o777) == "0o700"
    (tree / "sub").mkdir()
    (tree / "sub" / "f").write_text("x")
    (tree / "dir-link").symlink_to(outside)
    (tree / "sub" / "file-link").symlink_to(outside / "keep")
    leanos.remove_tree(str(tree))
    assert not tree.exists()
    assert (outside / "keep").read_text() == "kept"


def test_copy_file_refuses_an_existing_name(tmp_path: Path) -> None:
    source = tmp_path / "s"
    source.write_bytes(b"\x00guard\xff" * 1000)
    target = tmp_path / "t"
    leanos.copy_file(str(source), str(target))
    assert target.read_bytes() == source.read_bytes()
    (tmp_path / "planted").symlink_to(tmp_path / "elsewhere")
    try:
        leanos.copy_file(str(source), str(tmp_path / "planted"))
    except FileExistsError:
        pass
    else:
        raise AssertionError("copied through a planted name")
    assert not (tmp_path / "elsewhere").exists()


def _reference_git_paths(path_variable: str) -> tuple[str, list[str]] | None:
    """D387's ``git_paths``: every name resolved in full, every same-size file read whole."""
    first = shutil.which("git", path=path_variable or toolns._SYSTEM_PATH)
    if first is None:
        return None
    real = os.path.realpath(first)
    wanted = os.stat(real)
    content = Path(real).read_bytes()
    found = {real}
    for directory in dict.fromkeys(d for d in [*path_variable.split(":"), *toolns.GIT_HOMES] if d):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = os.path.realpath(entry.path)
            if not entry.name.startswith("git") or not os.path.isfile(target):
                continue
            if os.path.getsize(target) == wanted.st_size and Path(target).read_bytes() == content:
                found.add(target)
    return real, sorted(found)


def test_git_paths_finds_every_copy_its_shortcuts_included(tmp_path: Path) -> None:
    """Links to a plain name beside them, links to links, hard links, a copy, a same-size
    impostor and a copy changed in its last byte: the same answer as resolving all."""
    real = shutil.which("git")
    assert real is not None
    data = Path(os.path.realpath(real)).read_bytes()
    core, other, bin_ = tmp_path / "core", tmp_path / "other", tmp_path / "bin"
    for folder in (core, other, bin_):
        folder.mkdir()
    (core / "git").write_bytes(data)
    (core / "git").chmod(0o755)
    (core / "git-push").symlink_to("git")  # a plain name beside it
    (core / "git-hop").symlink_to("git-push")  # a link to a link
    os.link(core / "git", other / "git-hard")  # another name of the same inode
    (other / "git-far").symlink_to("../core/git")
    (other / "git-copy").write_bytes(data)
    (other / "git-copy").chmod(0o755)
    (other / "git-same-size").write_bytes(b"\0" * len(data))
    (other / "git-last").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    (bin_ / "git").symlink_to(core / "git")
    (bin_ / "git-dir").symlink_to(other)
    path = os.pathsep.join(map(str, (bin_, core, other)))
    found = toolns.git_paths(path)
    assert found == _reference_git_paths(path)
    assert found is not None
    assert found[0] == str(core / "git")
    assert str(other / "git-same-size") not in found[1]
    assert str(other / "git-last") not in found[1]
    assert {str(core / "git"), str(other / "git-hard"), str(other / "git-copy")} <= set(found[1])
