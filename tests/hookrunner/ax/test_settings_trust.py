"""A user-level settings file is trusted on the descriptor that is read (issue 44, D386).

``~/.claude/settings.json`` (and the file ``claude install`` moved the user's hooks
to) runs its hooks as the runner, so it is read only when it and its directory are
the runner's user's or root's and nobody else can change them. The check used to
resolve the name and look at the target, then open the name again: a symlink in a
directory the tools can write could be pointed elsewhere in between. Now the file
is opened once, and what was opened (``fstat`` of the descriptor, and the directory
the kernel says it is in) is what is judged and read; the directory holding the
name must be the runner's too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.loader import SettingsPlaces, load_ax_config

NOBODY = 65534


def hooks(marker: str) -> str:
    entry = {"type": "command", "command": f"echo {marker}"}
    return json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [entry]}]}})


@pytest.fixture
def home(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    (tmp_path / "home").chmod(0o755)
    (tmp_path / "home" / ".claude").chmod(0o755)
    (tmp_path / "ws").mkdir()
    return tmp_path / "home"


def load(home: Path) -> tuple[list[str], list[str]]:
    places = SettingsPlaces(home=home, managed=home / "no-managed.json")
    config = load_ax_config(home.parent / "ws", trusted=False, settings=places)
    return [entry.command for entry in config.entries], list(config.notices)


def test_a_trusted_file_is_read(home: Path) -> None:
    (home / ".claude" / "settings.json").write_text(hooks("mine"))
    assert load(home) == (["echo mine"], [])


def test_a_dotfiles_link_to_a_trusted_file_is_read(home: Path) -> None:
    dotfiles = home / "dotfiles"
    dotfiles.mkdir(mode=0o755)
    (dotfiles / "claude-settings.json").write_text(hooks("dotfiles"))
    (home / ".claude" / "settings.json").symlink_to(dotfiles / "claude-settings.json")
    assert load(home) == (["echo dotfiles"], [])


def test_a_link_in_a_directory_others_can_write_is_ignored(home: Path) -> None:
    trusted = home / "trusted"
    trusted.mkdir(mode=0o755)
    (trusted / "settings.json").write_text(hooks("target"))
    (home / ".claude").chmod(0o777)  # the tools could swap the link at any time
    (home / ".claude" / "settings.json").symlink_to(trusted / "settings.json")
    commands, notices = load(home)
    assert commands == []
    assert len(notices) == 1
    assert notices[0].startswith(f"{home / '.claude' / 'settings.json'}: ignored: it is in ")
    assert "which someone other than the runner's user or root can change" in notices[0]


@pytest.mark.privileged  # chown to the tool user
def test_what_is_judged_is_what_is_read(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name resolves to a trusted file when looked at, to the tool's file when opened
    (a link swapped in between): the tool's file is judged, and ignored."""
    good, evil = home / "good", home / "evil"
    for directory in (good, evil):
        directory.mkdir(mode=0o755)
    (good / "settings.json").write_text(hooks("good"))
    (evil / "settings.json").write_text(hooks("evil"))
    os.chown(evil / "settings.json", NOBODY, NOBODY)  # the tool user's file
    name = home / ".claude" / "settings.json"
    name.symlink_to(evil / "settings.json")
    real = os.path.realpath

    def swapped(path: os.PathLike[str] | str, **kwargs: bool) -> str:
        return str(good / "settings.json") if str(path) == str(name) else real(path, **kwargs)

    monkeypatch.setattr(os.path, "realpath", swapped)
    commands, notices = load(home)
    assert commands == []
    assert notices == [
        f"{name}: ignored: it is owned by uid {NOBODY}, not by the runner's user or root"
    ]


def test_a_file_others_can_write_is_ignored(home: Path) -> None:
    name = home / ".claude" / "settings.json"
    name.write_text(hooks("open"))
    name.chmod(0o666)
    commands, notices = load(home)
    assert commands == []
    assert notices == [f"{name}: ignored: it is writable by group or others (mode 0666)"]
