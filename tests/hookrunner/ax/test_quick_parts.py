"""The parts of the warm runner and of `claude install`, in-process (the end-to-end tests
in test_quickfire.py and test_claude_install.py run them as real processes, which the
coverage of `make test-unit` does not see)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax import claudeinstall, quickclient, quickfire
from sandbox_egress.hookrunner.errors import UsageError

RUNNER = "/opt/hr/bin/hookrunner"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose socket paths fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="hq-"))
    yield path
    for child in sorted(path.rglob("*"), reverse=True):
        child.unlink() if not child.is_dir() or child.is_symlink() else child.rmdir()
    path.rmdir()


# -- claude install, pure ---------------------------------------------------------------


def commands(moved: Path) -> dict[str, str]:
    return {
        e: claudeinstall.runner_command([RUNNER], e, moved, None)
        for e in claudeinstall.CLAUDE_EVENTS
    }


def test_installed_moves_the_hooks_of_fired_events_and_keeps_the_rest() -> None:
    own = {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}
    notify = [{"hooks": [{"type": "command", "command": "notify-send hi"}]}]
    document = {"model": "opus", "hooks": {"PreToolUse": [own], "Notification": notify}}
    moved_path = Path("/h/.claude/hookrunner-hooks.json")
    settings, moved, found = claudeinstall.installed(document, {}, RUNNER, commands(moved_path))
    assert (moved, found) == ({"hooks": {"PreToolUse": [own]}}, [])
    assert settings["model"] == "opus"
    assert settings["hooks"]["Notification"] == notify
    (entry,) = settings["hooks"]["PreToolUse"]
    fails_closed = (
        ' || { s=$?; [ "$s" -eq 2 ] || echo "hookrunner: the hook command failed (exit $s), '
        'so this call is blocked" >&2; exit 2; }'
    )  # D395
    assert entry["hooks"][0]["command"] == (
        f"{RUNNER} fire PreToolUse --claude-json --claude-hooks {moved_path}{fails_closed}"
    )
    (stop,) = settings["hooks"]["Stop"]  # an event that cannot block: the status as it is
    assert (
        stop["hooks"][0]["command"]
        == f"{RUNNER} fire Stop --claude-json --claude-hooks {moved_path}"
    )
    # Installing the result again changes nothing; uninstalling restores the document.
    assert claudeinstall.installed(settings, moved, RUNNER, commands(moved_path)) == (
        settings,
        moved,
        [],
    )
    assert claudeinstall.uninstalled(settings, moved, RUNNER) == document


def test_the_quick_client_form_is_recognised_as_the_runner() -> None:
    client = ["/v/bin/python", "-I", "-S", "/v/quickclient.py", RUNNER]
    command = claudeinstall.runner_command(client, "Stop", Path("/m.json"), Path("/ax.json"))
    assert command.endswith("--claude-hooks /m.json --ax-config /ax.json")
    group = {"hooks": [{"type": "command", "command": command}]}
    assert claudeinstall.uninstalled({"hooks": {"Stop": [group]}}, {}, RUNNER) == {}
    broken = {"hooks": [{"type": "command", "command": "echo 'unterminated"}]}
    assert claudeinstall.uninstalled({"hooks": {"Stop": [broken]}}, {}, RUNNER) == {
        "hooks": {"Stop": [broken]}
    }


def test_hooks_that_are_not_an_object_are_refused() -> None:
    with pytest.raises(UsageError, match="not an object"):
        claudeinstall.installed({"hooks": []}, {}, RUNNER, {})


def test_install_and_uninstall_files(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    own = {"matcher": "", "hooks": [{"type": "command", "command": "true"}]}
    settings.write_text(json.dumps({"hooks": {"Stop": [own]}}))
    os.chmod(settings, 0o640)
    moved = claudeinstall.install(settings, RUNNER, None)
    assert json.loads(moved.read_text()) == {"hooks": {"Stop": [own]}}
    assert settings.stat().st_mode & 0o777 == 0o640  # the mode is kept
    assert moved.stat().st_mode & 0o777 == 0o600
    assert json.loads(settings.with_name("settings.json.hookrunner-backup").read_text()) == {
        "hooks": {"Stop": [own]}
    }
    claudeinstall.uninstall(settings, RUNNER)
    assert json.loads(settings.read_text()) == {"hooks": {"Stop": [own]}}
    assert not moved.exists()


@pytest.mark.parametrize("text", ["[1]", "{bad"])
def test_a_settings_file_that_cannot_be_read_changes_nothing(tmp_path: Path, text: str) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(text)
    with pytest.raises(UsageError, match="nothing was changed"):
        claudeinstall.install(settings, RUNNER, None)
    assert settings.read_text() == text


def test_settings_path_by_scope(tmp_path: Path) -> None:
    assert claudeinstall.settings_path("project", None, tmp_path) == (
        tmp_path / ".claude" / "settings.json"
    )
    assert claudeinstall.settings_path("user", Path("/h"), tmp_path) == Path(
        "/h/.claude/settings.json"
    )
    with pytest.raises(UsageError, match="HOME"):
        claudeinstall.settings_path("user", None, tmp_path)


# -- the quick client and its server ---------------------------------------------------------


def test_the_request_carries_argv_environment_directory_and_build() -> None:
    message = quickclient.request(["fire", "Stop"])
    (size,) = struct.unpack(">I", message[:4])
    document = quickfire.decode(message[4:])
    assert size == len(message) - 4
    assert document["argv"] == ["fire", "Stop"]
    assert document["cwd"] == os.getcwd()
    assert document["env"] == dict(os.environ)
    assert document["build"] == quickclient.build_id(quickclient.installation())
    assert document["umask"] == os.umask(document["umask"])  # read back: unchanged


def test_a_client_without_arguments_is_a_usage_error() -> None:
    assert quickclient.main([]) == 2


def test_the_server_listens_once_per_path(short_dir: Path) -> None:
    path = str(short_dir / "hookrunner-0" / "fire.sock")
    first = quickfire.listen(path)
    assert first is not None
    try:
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert quickfire.listen(path) is None  # a live server answers there
    finally:
        first.close()
    again = quickfire.listen(path)  # the socket nobody listens on is replaced
    assert again is not None
    again.close()


def test_the_server_refuses_a_directory_others_can_write(short_dir: Path) -> None:
    directory = short_dir / "shared"
    directory.mkdir(mode=0o777)
    os.chmod(directory, 0o777)
    with pytest.raises(UsageError, match="not a directory private"):
        quickfire.listen(str(directory / "fire.sock"))


def test_a_request_and_its_descriptors_are_received() -> None:
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read, write = os.pipe()
    with client, server:
        message = quickclient.request(["fire", "PreToolUse"])
        fds = struct.pack("3i", read, write, write)
        client.sendmsg([message[:100]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        client.sendall(message[100:])
        document, received = quickfire._receive(server)
    assert document["argv"] == ["fire", "PreToolUse"]
    assert len(received) == 3
    os.write(received[1], b"x")
    assert os.read(read, 1) == b"x"  # the descriptors are the sender's pipe
    for fd in (read, write, *received):
        os.close(fd)


def test_words_that_are_not_text_arrive_as_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the cold runner would read (undecodable bytes, ``=`` in a value, an empty
    argument, an empty environment) is what the warm child reads."""
    odd = os.fsdecode(b"caf\xe9")
    monkeypatch.setattr(os, "environ", {"A": "x=y", "B": "", odd: odd})
    document = quickfire.decode(quickclient.request(["fire", "", odd])[4:])
    assert document["argv"] == ["fire", "", odd]
    assert document["env"] == {"A": "x=y", "B": "", odd: odd}
    monkeypatch.setattr(os, "environ", {})
    assert quickfire.decode(quickclient.request([])[4:])["env"] == {}


@pytest.mark.parametrize(
    "body",
    [b"", b"b\0/\0" + b"18", b"b\0/\x0018\x00x", b"b\0/\x0018\x001\x00fire\x00NOEQUALS",
     b"b\0/\x0018\x001\x00fire\x00=v"],
    ids=["empty", "too few words", "count not a number", "entry without =", "no name"],
)  # fmt: skip
def test_a_body_that_is_not_a_request_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="not a request"):
        quickfire.decode(body)


@pytest.mark.parametrize(
    "message",
    [b"\x00\x00", struct.pack(">I", quickfire.MAX_REQUEST + 1), struct.pack(">I", 10) + b"b\0/"],
    ids=["no length", "too large", "cut short"],
)
def test_a_request_that_is_not_one_is_refused(message: bytes) -> None:
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client, server:
        client.sendall(message)
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(ValueError):
            quickfire._receive(server)


def test_project_scope_moves_the_hooks_under_home(tmp_path: Path) -> None:
    home, workspace = tmp_path / "h", tmp_path / "repo"
    moved = claudeinstall.moved_path("project", home, workspace)
    assert moved.parent == home / ".claude" / "hookrunner-projects"
    assert moved.name.startswith("repo-") and moved.suffix == ".json"
    assert claudeinstall.moved_path("project", home, tmp_path / "x" / "repo") != moved
    assert claudeinstall.moved_path("user", home, workspace) == (
        home / ".claude" / claudeinstall.MOVED_NAME
    )
    with pytest.raises(UsageError, match="HOME"):
        claudeinstall.moved_path("project", None, workspace)
    settings = workspace / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    own = {"matcher": "", "hooks": [{"type": "command", "command": "true"}]}
    settings.write_text(json.dumps({"hooks": {"Stop": [own]}}))
    assert claudeinstall.install(settings, RUNNER, None, moved_to=moved) == moved
    assert moved.parent.stat().st_mode & 0o777 == 0o700
    claudeinstall.uninstall(settings, RUNNER, moved)
    assert json.loads(settings.read_text()) == {"hooks": {"Stop": [own]}}


def test_hooks_an_earlier_install_left_in_the_workspace_are_put_back(tmp_path: Path) -> None:
    settings = tmp_path / "repo" / ".claude" / "settings.json"
    own = {"matcher": "", "hooks": [{"type": "command", "command": "true"}]}
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"hooks": {"Stop": [own]}}))
    legacy = claudeinstall.install(settings, RUNNER, None)  # beside it, as before D240
    moved = claudeinstall.moved_path("project", tmp_path / "h", settings.parent.parent)
    with pytest.raises(UsageError, match="uninstall` first"):
        claudeinstall.install(settings, RUNNER, None, moved_to=moved)
    claudeinstall.uninstall(settings, RUNNER, moved)
    assert json.loads(settings.read_text()) == {"hooks": {"Stop": [own]}}
    assert not legacy.exists()


def test_what_the_warm_runner_builds_before_it_forks_serves_one_call_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The prepared parser answers each argv alone (parsing leaves it as it was); the
    prepared metrics go to one call, the next gets a registry of its own (D250)."""
    from sandbox_egress.hookrunner import cli
    from sandbox_egress.hookrunner.ax import cli as ax_cli

    monkeypatch.setattr(cli, "_PREPARED", [])
    monkeypatch.setattr(ax_cli, "_SPARE_METRICS", [])
    cli.prepare()
    prepared = cli._PREPARED[0]
    first = prepared.parse_args(["fire", "Stop", "--claude-exit-codes", "--workspace", "/a"])
    second = prepared.parse_args(["fire", "PreToolUse"])
    assert (first.event, first.claude_exit_codes, first.workspace) == ("Stop", True, "/a")
    assert (second.event, second.claude_exit_codes, second.workspace) == ("PreToolUse", False, ".")
    monkeypatch.setattr(cli, "_parser", lambda: pytest.fail("built again"))
    with pytest.raises(SystemExit):
        cli.main(["fire", "NoSuchEvent"])  # main parses with the prepared parser
    assert "invalid choice: 'NoSuchEvent'" in capsys.readouterr().err
    ax_cli.prepare_metrics()
    spare = ax_cli._SPARE_METRICS[0]
    assert ax_cli._metrics() is spare
    assert ax_cli._metrics() is not spare


def _imported(code: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", *code], capture_output=True, text=True
    )
    lines = [line.split("|")[-1] for line in done.stderr.splitlines() if "|" in line]
    return {name.strip() for name in lines[1:]}  # the first line is the header


def test_the_quick_client_imports_nothing_but_socket() -> None:
    """Each import is paid on every hook call: the client may add `_socket` to what `os`
    brings, and no more (json and socket were ~10 ms of a call, D249)."""
    client = _imported([quickclient.__file__])  # no arguments: its usage, exit 2
    assert client - _imported(["-c", "import os"]) == {"_socket"}
