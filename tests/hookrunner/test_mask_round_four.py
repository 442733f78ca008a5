"""Masks, fourth round (issue 44, D384-D385): below symlinked directories, over the runner's
own file tools, and never over templates that hold no secret.

* A ``.env`` below a symlinked directory that leads out of the workspace is masked
  (the walk follows a directory link once, to its target; a loop ends).
* ``read_file`` / ``write_file`` of a masked file are refused, whatever the path that
  reaches it (the name, a link, a hard link): the check is on the opened descriptor.
* ``.env.example``, ``.env.sample``, ``.env.template``, ``.env.dist`` (and the ``.tmpl``
  / ``.tpl`` spellings, also after an environment: ``.env.production.example``) are
  neither masked nor refused by ``protect-env-files``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.packs import envfiles, judge
from sandbox_egress.hookrunner.enforce import mask
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool

SECRET = "API_KEY=sk-live-do-not-leak-456"
TEMPLATES = (".env.example", ".env.sample", ".env.template", ".env.dist", ".env.tmpl",
             ".env.tpl", ".ENV.Example", ".env.production.example", ".env.local.sample")  # fmt: skip
SECRETS = (".env", ".env.local", ".env.production", ".env.example.local", ".env.examples")


@pytest.fixture
def top() -> Iterator[Path]:
    """``ws`` (the workspace) and, beside it, ``shared`` (a directory outside it)."""
    root = Path(tempfile.mkdtemp(prefix="hr-mask4-"))
    try:
        (root / "ws").mkdir()
        (root / "shared" / "config").mkdir(parents=True)
        yield root
    finally:
        shutil.rmtree(root)


def test_an_env_below_a_symlinked_directory_outside_is_masked(top: Path) -> None:
    ws, shared = top / "ws", top / "shared"
    (shared / "config" / ".env").write_text(SECRET + "\n")
    (shared / "config" / "app.yaml").write_text("a: 1\n")
    (ws / "config").symlink_to(shared / "config")
    (ws / "loop").symlink_to(ws)  # a loop ends
    (ws / "away").symlink_to(top)  # reaches shared again: each directory walked once
    (ws / "gone").symlink_to(top / "nowhere")
    assert mask.protected_files(ws) == [str(shared / "config" / ".env")]


def test_the_entry_bound_counts_what_directory_links_lead_to(top: Path) -> None:
    for n in range(30):
        (top / "shared" / f"f{n}").write_text("x")
    (top / "ws" / "big").symlink_to(top / "shared")
    with pytest.raises(mask.MaskIncomplete):
        mask.protected_files(top / "ws", limit=20)


@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_are_not_masked_or_refused(name: str, top: Path) -> None:
    ws = top / "ws"
    (ws / name).write_text("API_KEY=\n")
    assert not mask.protected_name(name)
    assert mask.protected_files(ws) == []
    assert not envfiles.is_env_name(name)
    for command in (f"cat {name}", f"cp {name} defaults.txt", f"grep -r KEY {name}"):
        assert judge.env_file([(command, "bash")]) == (None, None), command
    tool = run_tool("read_file", {"path": name}, workspace=Workspace(ws), env={}, timeout=5)
    assert (tool.ok, tool.output) == (True, "API_KEY=\n")


@pytest.mark.parametrize("name", SECRETS)
def test_secrets_stay_masked_and_refused(name: str) -> None:
    assert mask.protected_name(name)
    assert envfiles.is_env_name(name)
    assert judge.env_file([(f"cat {name}", "bash")])[0] == name


def test_a_template_that_is_a_link_to_a_secret_is_masked(top: Path) -> None:
    ws = top / "ws"
    (ws / ".env").write_text(SECRET + "\n")
    (ws / ".env.example").symlink_to(".env")
    assert mask.protected_files(ws) == [str(ws / ".env")]
    tool = run_tool("read_file", {"path": ".env.example"}, workspace=Workspace(ws), env={},
                    timeout=5)  # fmt: skip
    assert tool.ok is False
    assert "sk-live" not in tool.output + (tool.error or "")


def read(ws: Path, path: str) -> tuple[bool, str, str]:
    tool = run_tool("read_file", {"path": path}, workspace=Workspace(ws), env={}, timeout=5)
    return tool.ok, tool.output, tool.error or ""


def test_read_file_of_a_masked_file_is_refused_by_every_path(top: Path) -> None:
    ws = top / "ws"
    (ws / "conf").mkdir()
    (ws / ".env").write_text(SECRET + "\n")
    os.link(ws / ".env", ws / "conf" / "copy.txt")  # a hard link: the same file
    (ws / "notes.txt").symlink_to(".env")
    for path in (".env", str(ws / ".env"), "conf/copy.txt", "notes.txt", "conf/../.env"):
        ok, output, error = read(ws, path)
        assert (ok, output) == (False, ""), path
        assert "is masked: .env files hold secrets" in error, path
    (ws / "plain.txt").write_text("hello\n")
    assert read(ws, "plain.txt") == (True, "hello\n", "")


def test_write_file_of_a_masked_file_is_refused(top: Path) -> None:
    ws = top / "ws"
    (ws / ".env").write_text(SECRET + "\n")
    tool = run_tool("write_file", {"path": ".env", "content": "X=1\n"}, workspace=Workspace(ws),
                    env={}, timeout=5)  # fmt: skip
    assert tool.ok is False
    assert "is masked" in (tool.error or "")
    assert (ws / ".env").read_text() == SECRET + "\n"
    made = run_tool("write_file", {"path": "sub/.env.example", "content": "X=\n"},
                    workspace=Workspace(ws), env={}, timeout=5)  # fmt: skip
    assert made.ok, made


def test_a_read_is_refused_when_the_walk_cannot_finish(
    top: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = top / "ws"
    (ws / "a.txt").write_text("a\n")
    monkeypatch.setattr(mask.protected_files, "__defaults__", (0,))
    ok, _, error = read(ws, "a.txt")
    assert ok is False
    assert "the .env files cannot all be masked" in error
