"""Discovery: operator file then workspace file, loaded once each, snapshotted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox_egress.hookrunner import loader
from sandbox_egress.hookrunner.loader import MAX_FILE_BYTES, load_config
from tests.hookrunner.helpers import Env, command, pre_group, rule


def _group(name: str) -> dict[str, object]:
    return {name: pre_group(rule("*", command(f"echo {name}")))}


def test_operator_file_first_then_workspace_file(env: Env) -> None:
    env.hooks(_group("repo"))
    env.hooks(_group("operator"), system=True)
    config = load_config(env.workspace, env.system_config)
    assert [g.name for g in config.groups] == ["operator", "repo"]
    assert config.files == (str(env.system_config), str(env.workspace / ".agents/hooks.json"))
    assert config.problems == ()


def test_default_operator_path_is_slash_agents(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    operator = env.root / "fake-root" / ".agents" / "hooks.json"
    operator.parent.mkdir(parents=True)
    operator.write_text(json.dumps(_group("operator")))
    monkeypatch.setattr(loader, "SYSTEM_CONFIG", operator)
    env.hooks(_group("repo"))
    config = load_config(env.workspace)
    assert [g.name for g in config.groups] == ["operator", "repo"]


def test_missing_default_files_are_not_problems(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "SYSTEM_CONFIG", env.root / "nowhere" / "hooks.json")
    config = load_config(env.workspace)
    assert (config.groups, config.problems, config.files) == ((), (), ())


def test_missing_explicit_operator_file_is_a_problem(env: Env) -> None:
    env.hooks(_group("repo"))
    missing = env.root / "missing.json"
    config = load_config(env.workspace, missing)
    assert [str(p) for p in config.problems] == [f"{missing}: $: file does not exist"]
    assert [g.name for g in config.groups] == ["repo"]


def test_one_file_reached_both_ways_is_loaded_once(env: Env) -> None:
    path = env.hooks(_group("repo"))
    config = load_config(env.workspace, path)
    assert [g.name for g in config.groups] == ["repo"]
    assert config.files == (str(path),)


def test_one_file_reached_through_a_symlink_is_loaded_once(env: Env) -> None:
    path = env.hooks(_group("repo"))
    link = env.root / "link.json"
    link.symlink_to(path)
    config = load_config(env.workspace, link)
    assert [g.name for g in config.groups] == ["repo"]


def test_workspace_slash_loads_the_operator_file_once(tmp_path: Path) -> None:
    # The workspace "/" makes <workspace>/.agents/hooks.json the same path as the default.
    config = load_config(Path("/"), tmp_path / "absent.json")
    names = [g.name for g in config.groups]
    assert len(names) == len(set(names))


def test_snapshot_does_not_change_when_the_file_does(env: Env) -> None:
    path = env.hooks(_group("before"))
    config = load_config(env.workspace, env.system_config)
    path.write_text(json.dumps(_group("after")))
    assert [g.name for g in config.groups] == ["before"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            b"{not json",
            "line 1, column 2: not valid JSON: Expecting property name enclosed in double quotes",
        ),
        (b'{"a" 1}', "line 1, column 6: not valid JSON: Expecting ':' delimiter"),
        (b"", "line 1, column 1: not valid JSON: Expecting value"),
        (b'{"g": \xff}', "$: not UTF-8 (byte offset 6)"),
        (b"[" * 100_000, "$: not valid JSON: nested too deeply"),
        (b'{"g": NaN}', "$: not valid JSON: NaN is not a JSON value"),
    ],
)
def test_unusable_workspace_file_is_a_problem_and_the_operator_file_still_loads(
    env: Env, content: bytes, reason: str
) -> None:
    env.hooks(_group("operator"), system=True)
    path = env.workspace / ".agents" / "hooks.json"
    path.write_bytes(content)
    config = load_config(env.workspace, env.system_config)
    assert [str(p) for p in config.problems] == [f"{path}: {reason}"]
    assert [g.name for g in config.groups] == ["operator"]


def test_utf8_bom_is_accepted(env: Env) -> None:
    path = env.workspace / ".agents" / "hooks.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_group("repo")).encode())
    config = load_config(env.workspace, env.system_config)
    assert ([g.name for g in config.groups], config.problems) == (["repo"], ())


def test_directory_instead_of_file_is_a_problem(env: Env) -> None:
    (env.workspace / ".agents" / "hooks.json").mkdir()
    config = load_config(env.workspace, env.system_config)
    path = env.workspace / ".agents" / "hooks.json"
    assert [str(p) for p in config.problems] == [f"{path}: $: not a regular file"]


def test_too_large_file_is_a_problem(env: Env) -> None:
    path = env.workspace / ".agents" / "hooks.json"
    with open(path, "wb") as handle:
        handle.write(b"{}")
        handle.write(b" " * MAX_FILE_BYTES)
    config = load_config(env.workspace, env.system_config)
    assert [str(p) for p in config.problems] == [f"{path}: $: larger than {MAX_FILE_BYTES} bytes"]


def test_fifo_is_not_read(env: Env) -> None:
    fifo = env.root / "fifo.json"
    os.mkfifo(fifo)
    # Without a writer a blocking open would hang; the loader opens it O_NONBLOCK
    # (issue 11, item 6), so no writer is needed any more.
    config = load_config(env.workspace, fifo)
    assert [str(p) for p in config.problems] == [f"{fifo}: $: not a regular file"]
