"""The packs' pure rules as tables: the shell reader, force pushes, env files, test runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_egress.hookrunner.ax.packs import envfiles, git, testruns
from sandbox_egress.hookrunner.ax.packs.commands import read_script
from sandbox_egress.hookrunner.ax.packs.formatters import RunAs, find_formatter

SHELL_CASES = [
    # (name, text, [argv...], complete)
    ("plain", "git push -f origin main", [["git", "push", "-f", "origin", "main"]], True),
    ("and-list", "cd x && git push", [["cd", "x"], ["git", "push"]], True),
    ("newline", "a\nb;c", [["a"], ["b"], ["c"]], True),
    ("pipe", "cat a | grep b", [["cat", "a"], ["grep", "b"]], True),
    ("single quotes keep separators", "echo 'a;b'", [["echo", "a;b"]], True),
    ("double quotes", 'echo "a b"', [["echo", "a b"]], True),
    ("backslash", r"echo a\ b", [["echo", "a b"]], True),
    ("comment", "ls # git push -f", [["ls"]], True),
    ("hash inside a word", "echo a#b", [["echo", "a#b"]], True),
    ("substitution read first", "echo $(cat x)", [["cat", "x"], ["echo", "$(cat x)"]], True),
    ("substitution in quotes", 'echo "$(cat x)"', [["cat", "x"], ["echo", "$(cat x)"]], True),
    ("backticks", "echo `cat x`", [["cat", "x"], ["echo", "`cat x`"]], True),
    ("process substitution", "diff <(cat a) b", [["cat", "a"], ["diff", "b"]], True),
    ("assignment and sudo", "FOO=1 sudo -u bob git push", [["git", "push"]], True),
    ("env wrapper", "env -i A=1 git push", [["git", "push"]], True),
    ("timeout wrapper", "timeout 5 git push -f", [["git", "push", "-f"]], True),
    ("keywords", "if git push; then echo; fi", [["git", "push"], ["echo"]], True),
    ("sh -c", "sh -c 'git push -f'", [["sh", "-c", "git push -f"], ["git", "push", "-f"]], True),
    ("bash -lc", 'bash -lc "ls"', [["bash", "-lc", "ls"], ["ls"]], True),
    ("eval", "eval git push", [["eval", "git", "push"], ["git", "push"]], True),
    ("heredoc body skipped", "cat <<EOF\ngit push -f\nEOF\nls", [["cat"], ["ls"]], True),
    ("unclosed quote", "echo 'abc", [["echo"], ["echo", "abc"]], False),
]


@pytest.mark.parametrize(("name", "text", "argvs", "complete"), SHELL_CASES)
def test_shell_commands(name: str, text: str, argvs: list[list[str]], complete: bool) -> None:
    script = read_script(text)
    assert ([list(c.argv) for c in script.commands], script.complete) == (argvs, complete)


def test_redirections_have_their_targets_and_fds_are_dropped() -> None:
    [command] = read_script("cat .env 2>/dev/null >> out &> both").commands
    assert command.words == ("cat", ".env")
    assert command.redirects == ((">", "/dev/null"), (">>", "out"), ("&>", "both"))


FORCE_PUSHES = [
    ("git push --force", "git push --force"),
    ("git push -f", "git push -f"),
    ("git push -fu origin main", "git push -fu"),
    ("git push -uf origin main", "git push -uf"),
    ("git push -vfn", "git push -vfn"),
    ("git push --force-with-lease", "git push --force-with-lease"),
    ("git push --force-with-lease=main:abc123 origin", "git push --force-with-lease=main:abc123"),
    ("git push --force-w", "git push --force-w"),
    ("git push origin +main", "git push +main"),
    ("git push origin +HEAD:refs/heads/main", "git push +HEAD:refs/heads/main"),
    ("git push -- origin +main", "git push +main"),
    ("git push origin main --force", "git push --force"),
    ("git push --mirror", "git push --mirror"),
    ("git push --no-force --force", "git push --force"),
    ("git -C repo -c push.default=current push -f", "git push -f"),
    ("/usr/bin/git push -f", "git push -f"),
    ("FOO=1 git push -f", "git push -f"),
    ("sudo git push --force", "git push --force"),
    ("cd repo && git push -f", "git push -f"),
    ("bash -c 'git push --force'", "git push --force"),
    ("echo $(git push -f)", "git push -f"),
    ("git push 'origin' \"+main\"", "git push +main"),
    ("git push -o ci.skip -f", "git push -f"),
]
NOT_FORCE_PUSHES = [
    "git push",
    "git push origin main",
    "git push -u origin main",
    "git push --follow-tags",
    "git push --tags origin",
    "git push --force-if-includes",
    "git push --force --no-force",
    "git push --force-with-lease --no-force-with-lease",
    "git push -ofoo origin main",
    "git push -o f origin main",
    "git push origin main:+x",
    "git pull --force",
    "git fetch -f",
    'echo "git push --force"',
    "git commit -m 'never git push -f'",
    "ls # git push -f",
    "gitk push -f",
    "git push --repo -f origin",
]


@pytest.mark.parametrize(("text", "spelling"), FORCE_PUSHES)
def test_force_push_every_spelling(text: str, spelling: str) -> None:
    assert git.force_push_in_shell(text) == spelling


@pytest.mark.parametrize("text", NOT_FORCE_PUSHES)
def test_not_a_force_push(text: str) -> None:
    assert git.force_push_in_shell(text) is None


@pytest.mark.parametrize(
    ("code", "spelling"),
    [
        ('subprocess.run(["git", "push", "-f"])', "git push -f"),
        ("os.system('git push --force-with-lease origin')", "git push --force-with-lease"),
        ('subprocess.run(["git", "push", "origin", "main"])', None),
        ('print("pushing")', None),
    ],
)
def test_force_push_in_python_code(code: str, spelling: str | None) -> None:
    assert git.force_push_in_code(code) == spelling


ENV_SHELL = [
    ("cat .env", ".env"),
    ("cat .env.local", ".env.local"),
    ("cat ./config/.env.production", "./config/.env.production"),
    ("less .ENV", ".ENV"),
    ("source .env", ".env"),
    (". .env", ".env"),
    ("echo KEY=1 >> .env", ".env"),
    ("printf x > .env.local", ".env.local"),
    ("cp .env /tmp/x", ".env"),
    ("docker run --env-file=.env img", "--env-file=.env"),
    ("X=$(<.env)", ".env"),
    ('echo "$(cat .env)"', ".env"),
    ("cat .env*", ".env*"),
    ("cat .e*", ".e*"),
    ("cat .{env,x}", ".env"),  # brace expansion followed
    ("scp host:.env .", "host:.env"),
    ("sudo cat .env", ".env"),
    ("bash -c 'cat .env'", ".env"),
    ("grep KEY .env.staging", ".env.staging"),
    ("cat 'unclosed .env", ".env"),
]
NOT_ENV_SHELL = [
    "echo .env",
    "printf '%s' .env.local",
    "ls -la .env",
    "test -f .env",
    "[ -f .env ]",
    "cat .envrc",
    "cat prod.env",
    "cat *",
    ".env/bin/python -m pip list",
    "cat environment.ts",
    "echo x > /dev/null",
]


@pytest.mark.parametrize(("text", "hit"), ENV_SHELL)
def test_env_files_in_shell(text: str, hit: str) -> None:
    assert envfiles.in_shell(text) == hit


@pytest.mark.parametrize("text", NOT_ENV_SHELL)
def test_not_env_files_in_shell(text: str) -> None:
    assert envfiles.in_shell(text) is None


@pytest.mark.parametrize(
    ("args", "hit"),
    [
        ({"filePath": "/w/.env"}, "/w/.env"),
        ({"file_path": ".env.local"}, ".env.local"),
        ({"path": "config/.env.test"}, "config/.env.test"),
        ({"paths": ["a.py", ".env"]}, ".env"),
        ({"pattern": "KEY", "include": "*.env"}, "*.env"),
        ({"pattern": "KEY", "include": ".env*"}, ".env*"),
        ({"patchText": "*** Begin Patch\n*** Update File: .env\n@@\n-A=1\n+A=2\n"}, ".env"),
        ({"diff": "--- a/.env.local\n+++ b/.env.local\n"}, ".env.local"),
        ({"filePath": "src/app.py"}, None),
        ({"path": ".env/bin/activate"}, None),
        ({"path": ".envrc"}, None),
        ({"pattern": ".env", "include": "*.py"}, None),
        ({"pattern": "KEY", "include": "*"}, None),
        ({"content": "read .env please", "path": "notes.md"}, None),
    ],
)
def test_env_files_in_tool_arguments(args: dict, hit: str | None) -> None:
    assert envfiles.in_arguments(args) == hit


@pytest.mark.parametrize(
    ("code", "hit"),
    [("open('.env').read()", ".env"), ("open('settings.toml')", None)],
)
def test_env_files_in_python_code(code: str, hit: str | None) -> None:
    assert envfiles.in_code(code) == hit


@pytest.mark.parametrize(
    ("text", "is_test"),
    [
        ("pytest -q", True),
        ("python -m pytest tests", True),
        ("python3.12 -m unittest", True),
        ("uv run pytest", True),
        ("poetry run pytest", True),
        ("npm test", True),
        ("npm run test:unit", True),
        ("pnpm t", True),
        ("go test ./...", True),
        ("cargo test", True),
        ("make test", True),
        ("make check", True),
        ("./gradlew test", True),
        ("npx vitest run", True),
        ("python -m pip install x", False),
        ("make build", False),
        ("npm install", False),
        ("go build", False),
        ("echo pytest", False),
    ],
)
def test_test_runs(text: str, is_test: bool) -> None:
    [command] = read_script(text).commands
    assert testruns.is_test_run(command.argv) is is_test


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("echo x > a.txt", "a.txt"),
        ("echo x >> log", "log"),
        ("rm -f a.py", "a.py"),
        ("mv a b", "b"),
        ("sed -i s/a/b/ f.py", "f.py"),
        ("git checkout -- f.py", "git checkout"),
        ("git apply x.patch", "git apply"),
        ("ls > /dev/null", None),
        ("cat a.py", None),
        ("git status", None),
        ("sed s/a/b/ f.py", None),
    ],
)
def test_shell_changes(text: str, change: str | None) -> None:
    [command] = read_script(text).commands
    assert testruns.shell_change(command) == change


@pytest.mark.parametrize(
    ("calls", "pending", "changed"),
    [
        ([{"filePath": "a.py"}], True, ["a.py"]),
        ([{"filePath": "a.py"}, {"command": "pytest"}], False, []),
        ([{"command": "pytest"}, {"filePath": "a.py"}], True, ["a.py"]),
        ([{"command": "sed -i s/a/b/ f.py && pytest -q"}], False, []),
        ([{"command": "pytest -q; rm f.py"}], True, ["f.py"]),
        ([{"command": "ls -la"}], False, []),
        ([{"code": "open('x', 'w').write('1')", "language": "python"}], True, ["python code"]),
        ([{"code": "make test", "language": "bash"}, {"path": "b.txt"}], True, ["b.txt"]),
        (
            [{"filePath": "a.py"}, {"filePath": "b.py"}, {"filePath": "a.py"}],
            True,
            ["b.py", "a.py"],
        ),
    ],
)
def test_state_follows_changes_and_test_runs(
    calls: list[dict], pending: bool, changed: list[str]
) -> None:
    state = testruns.State()
    for args in calls:
        testruns.record(state, args)
    assert (state.pending, state.changed) == (pending, changed)


@pytest.mark.parametrize(
    ("files", "command"),
    [
        ({"Makefile": "build:\n\ttrue\ntest:\n\tpytest\n"}, "make test"),
        ({"package.json": '{"scripts": {"test": "vitest"}}'}, "npm test"),
        ({"package.json": '{"scripts": {"build": "tsc"}}'}, None),
        ({"go.mod": "module x\n"}, "go test ./..."),
        ({"Cargo.toml": "[package]\n"}, "cargo test"),
        ({"pyproject.toml": "[project]\n"}, "python -m pytest"),
        ({}, None),
    ],
)
def test_project_test_command(tmp_path: Path, files: dict[str, str], command: str | None) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert testruns.test_command(str(tmp_path)) == command


def test_reminder_names_changes_and_command(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n")
    state = testruns.State()
    assert testruns.reminder(state, str(tmp_path)) is None
    for name in ("a", "b", "c", "d", "e", "f", "g"):
        state.change(f"{name}.go")
    assert testruns.reminder(state, str(tmp_path)) == (
        "[require-tests-on-stop] Files changed after the last test run "
        "(c.go, d.go, e.go, f.go, g.go and 2 more). Before ending, run `go test ./...` "
        "(or the type checks and verification this project uses) and report the result."
    )


def test_formatter_lookup_needs_an_installed_program(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gofmt = bin_dir / "gofmt"
    gofmt.write_text("#!/bin/sh\n")
    gofmt.chmod(0o755)
    found = find_formatter("main.go", str(tmp_path), str(bin_dir))
    assert found is not None
    assert (found[0].label, found[1]) == ("gofmt -w", str(gofmt))
    assert find_formatter("main.rs", str(tmp_path), str(bin_dir)) is None
    assert find_formatter("README", str(tmp_path), str(bin_dir)) is None
    local = tmp_path / "node_modules" / ".bin" / "prettier"
    local.parent.mkdir(parents=True)
    local.write_text("#!/bin/sh\n")
    local.chmod(0o755)
    # The workspace's own prettier only when it runs as the tool user (issue 20).
    assert find_formatter("app.ts", str(tmp_path), str(bin_dir)) is None
    found = find_formatter("app.ts", str(tmp_path), str(bin_dir), RunAs(65534, 65534))
    assert found is not None
    assert found[1] == str(local)
