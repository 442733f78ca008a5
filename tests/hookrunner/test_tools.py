"""The exec tools: workspace confinement (symlinks included) and code execution."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.enforce.tools import ToolResult, Workspace, run_tool
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.session import HookSession
from tests.hookrunner.helpers import base_environ


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "public").mkdir(parents=True)
    (root / "public" / "summary.json").write_text('{"team_size": 42}')
    (root / "notes.txt").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    (root / "escape_dir").symlink_to(outside)
    (root / "escape_file").symlink_to(outside / "secret.txt")
    (root / "inner_link").symlink_to(root / "notes.txt")
    (root / "dangling_out").symlink_to(outside / "missing.txt")
    return root


def tool(ws: Path, name: str, **args: object) -> ToolResult:
    return run_tool(name, args, workspace=Workspace(ws), env=base_environ(), timeout=2)


OUT = "path is outside the workspace"


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("read_file", {"path": "notes.txt"}, ToolResult(True, "hello\n")),
        ("read_file", {"path": "./public/../notes.txt"}, ToolResult(True, "hello\n")),
        ("read_file", {"path": "inner_link"}, ToolResult(True, "hello\n")),
        (
            "read_file",
            {"path": "../outside/secret.txt"},
            ToolResult(False, "", f"read_file: ../outside/secret.txt: {OUT}"),
        ),
        (
            "read_file",
            {"path": "/etc/passwd"},
            ToolResult(False, "", f"read_file: /etc/passwd: {OUT}"),
        ),
        (
            "read_file",
            {"path": "escape_dir/secret.txt"},
            ToolResult(False, "", f"read_file: escape_dir/secret.txt: {OUT}"),
        ),
        (
            "read_file",
            {"path": "escape_file"},
            ToolResult(False, "", f"read_file: escape_file: {OUT}"),
        ),
        (
            "read_file",
            {"path": "missing.txt"},
            ToolResult(False, "", "read_file: missing.txt: No such file or directory"),
        ),
        (
            "read_file",
            {"path": "public"},
            ToolResult(False, "", "read_file: public: Is a directory"),
        ),
        (
            "read_file",
            {"path": ""},
            ToolResult(False, "", "read_file: path must be a non-empty string without NUL"),
        ),
        (
            "read_file",
            {"path": 3},
            ToolResult(False, "", 'read_file: argument "path" must be a string'),
        ),
        ("read_file", {}, ToolResult(False, "", 'read_file: argument "path" must be a string')),
        (
            "list_files",
            {"path": "."},
            ToolResult(
                True, "dangling_out\nescape_dir\nescape_file\ninner_link\nnotes.txt\npublic/"
            ),
        ),
        (
            "list_files",
            {},
            ToolResult(
                True, "dangling_out\nescape_dir\nescape_file\ninner_link\nnotes.txt\npublic/"
            ),
        ),
        ("list_files", {"path": "public"}, ToolResult(True, "summary.json")),
        (
            "list_files",
            {"path": "escape_dir"},
            ToolResult(False, "", f"list_files: escape_dir: {OUT}"),
        ),
        ("list_files", {"path": ".."}, ToolResult(False, "", f"list_files: ..: {OUT}")),
        (
            "write_file",
            {"path": "escape_dir/new.txt", "content": "x"},
            ToolResult(False, "", f"write_file: escape_dir/new.txt: {OUT}"),
        ),
        (
            "write_file",
            {"path": "escape_file", "content": "x"},
            ToolResult(False, "", f"write_file: escape_file: {OUT}"),
        ),
        (
            "write_file",
            {"path": "dangling_out", "content": "x"},
            ToolResult(False, "", f"write_file: dangling_out: {OUT}"),
        ),
        (
            "write_file",
            {"path": "/tmp/hookrunner-never.txt", "content": "x"},
            ToolResult(False, "", f"write_file: /tmp/hookrunner-never.txt: {OUT}"),
        ),
        (
            "write_file",
            {"path": "a.txt"},
            ToolResult(False, "", 'write_file: a.txt: argument "content" must be a string'),
        ),
        (
            "delete_file",
            {"path": "escape_file"},
            ToolResult(False, "", f"delete_file: escape_file: {OUT}"),
        ),
        (
            "delete_file",
            {"path": "escape_dir/secret.txt"},
            ToolResult(False, "", f"delete_file: escape_dir/secret.txt: {OUT}"),
        ),
        ("delete_file", {"path": "."}, ToolResult(False, "", "delete_file: .: is a directory")),
        (
            "delete_file",
            {"path": "public"},
            ToolResult(False, "", "delete_file: public: is a directory"),
        ),
        (
            "delete_file",
            {"path": "missing.txt"},
            ToolResult(False, "", "delete_file: missing.txt: No such file or directory"),
        ),
    ],
)
def test_file_tool_table(
    ws: Path, name: str, args: dict[str, object], expected: ToolResult
) -> None:
    assert tool(ws, name, **args) == expected
    assert (ws.parent / "outside" / "secret.txt").read_text() == "top secret"
    assert not Path("/tmp/hookrunner-never.txt").exists()


def test_absolute_path_inside_the_workspace_is_fine(ws: Path) -> None:
    assert tool(ws, "read_file", path=str(ws / "public" / "summary.json")).output == (
        '{"team_size": 42}'
    )


def test_write_creates_parents_and_overwrites(ws: Path) -> None:
    assert tool(ws, "write_file", path="src/pkg/a.py", content="x = 1\n") == ToolResult(
        True, "wrote 6 bytes to src/pkg/a.py"
    )
    assert tool(ws, "write_file", path="src/pkg/a.py", content="é") == ToolResult(
        True, "wrote 2 bytes to src/pkg/a.py"
    )
    assert (ws / "src" / "pkg" / "a.py").read_text() == "é"


def test_write_through_an_inner_symlink_writes_the_target(ws: Path) -> None:
    assert tool(ws, "write_file", path="inner_link", content="new").ok
    assert ((ws / "notes.txt").read_text(), (ws / "inner_link").is_symlink()) == ("new", True)


def test_delete_removes_a_file_and_an_inner_link_only(ws: Path) -> None:
    assert tool(ws, "delete_file", path="inner_link") == ToolResult(True, "deleted inner_link")
    assert ((ws / "inner_link").exists(), (ws / "notes.txt").exists()) == (False, True)
    assert tool(ws, "delete_file", path="notes.txt") == ToolResult(True, "deleted notes.txt")
    assert not (ws / "notes.txt").exists()


def test_read_refuses_binary_and_huge_files(ws: Path) -> None:
    (ws / "bin").write_bytes(b"\xff\xfe")
    (ws / "big").write_bytes(b"x" * (1024 * 1024 + 1))
    assert tool(ws, "read_file", path="bin").error == "read_file: bin: file is not UTF-8 text"
    assert tool(ws, "read_file", path="big").error == (
        "read_file: big: file is larger than 1048576 bytes"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"code": "echo hi", "language": "bash"}, ToolResult(True, "hi\n")),
        ({"code": "echo hi"}, ToolResult(True, "hi\n")),
        ({"code": "print(6 * 7)", "language": "python"}, ToolResult(True, "42\n")),
        (
            {"code": "echo out; echo warn >&2", "language": "bash"},
            ToolResult(True, "out\n", "warn\n"),
        ),
        (
            {"code": "echo partial; exit 3", "language": "bash"},
            ToolResult(False, "partial\n", "exited with status 3"),
        ),
        (
            {"code": "ls /nonexistent-dir-hookrunner", "language": "bash"},
            ToolResult(
                False,
                "",
                "ls: cannot access '/nonexistent-dir-hookrunner': No such file or directory\n",
            ),
        ),
        (
            {"code": "import sys; sys.exit('boom')", "language": "python"},
            ToolResult(False, "", "boom\n"),
        ),
        ({"code": "cat", "language": "bash"}, ToolResult(True, "")),
        ({"code": "pwd", "language": "bash"}, None),
        (
            {"code": "x", "language": "ruby"},
            ToolResult(
                False, "", 'code_execution: unsupported language \'ruby\' (use "bash" or "python")'
            ),
        ),
        (
            {"language": "bash"},
            ToolResult(False, "", 'code_execution: argument "code" must be a string'),
        ),
    ],
)
def test_code_execution(ws: Path, args: dict[str, object], expected: ToolResult | None) -> None:
    result = tool(ws, "code_execution", **args)
    if expected is None:  # pwd: the workspace
        expected = ToolResult(True, os.path.realpath(ws) + "\n")
    assert result == expected


def test_code_execution_deadline(ws: Path) -> None:
    result = tool(ws, "code_execution", code="echo started; sleep 30", language="bash")
    assert result == ToolResult(False, "started\n", "timed out after 2 s")


@pytest.mark.privileged
def test_exec_runs_code_with_the_sanitised_environment(ws: Path, tmp_path: Path) -> None:
    empty = tmp_path / "none.json"
    empty.write_text("{}")
    environ = base_environ(API_TOKEN="t0ps3cret", LANG="C.UTF-8")
    args = {"code": 'echo "[${API_TOKEN:-unset}] [$LANG]"', "language": "bash"}
    # The full-environment switch is for command hooks only (issue 11, item 4).
    for full_env, expected in ((False, "[unset] [C.UTF-8]\n"), (True, "[unset] [C.UTF-8]\n")):
        session = HookSession(
            ws,
            system_config=empty,
            environ=environ,
            full_env=full_env,
            metrics=HookMetrics(),
            stream=io.StringIO(),
        )
        assert session.exec_tool("code_execution", args).output == expected
