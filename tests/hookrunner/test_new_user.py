"""Issue 20, item 6: what a new user sees.

A root runner with a root-owned workspace runs the tools as ``nobody``, and the
agent's code failed with a bare ``Permission denied`` on every write; now
``exec`` and ``session`` say so once at start, naming the workspace, its owner,
the tool user and the fix. And the shipped example gate prints
``{"decision": "allow"}`` to allow, so allowed calls log no fail-open warning.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sandbox_egress.hookrunner.enforce.contain import Credentials
from sandbox_egress.hookrunner.enforce.isolation import workspace_write_problem
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ, command, pre_group, rule

ROOT = Path(__file__).resolve().parents[2]
NOBODY = Credentials(65534, 65534, "nobody")


@pytest.fixture
def root_workspace() -> Iterator[Path]:
    """A root-owned 0755 workspace under /tmp, as an image build leaves it."""
    top = Path(tempfile.mkdtemp(prefix="hr-newuser-"))
    try:
        top.chmod(0o755)
        workspace = top / "ws"
        workspace.mkdir(mode=0o755)
        (top / "system.json").write_text("{}")
        yield workspace
    finally:
        shutil.rmtree(top)


def hookrunner(workspace: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    system = workspace.parent / "system.json"
    return subprocess.run(
        [HOOKRUNNER, *args, "--workspace", str(workspace), "--system-config", str(system)],
        input=stdin,
        capture_output=True,
        text=True,
        env=base_environ(),
        timeout=60,
    )


def expected_warning(workspace: Path) -> str:
    return (
        f"the tool user 'nobody' (uid 65534) cannot write the workspace '{workspace}' (owned by "
        "root (uid 0), mode 0755): code_execution and write_file will fail with 'Permission "
        f"denied'. Fix: make it writable by that user (chown -R 65534:65534 '{workspace}'), or "
        "run the tools as its owner (--tool-user / HOOKRUNNER_TOOL_USER)"
    )


@pytest.mark.privileged  # the tool runs as nobody
def test_exec_says_once_that_the_tool_user_cannot_write(root_workspace: Path) -> None:
    assert os.geteuid() == 0, "the runner of this test is root, as in the finding"
    done = hookrunner(root_workspace, "exec", "list_files", stdin='{"path": "."}')
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if "cannot write the workspace" in x]
    assert len(lines) == 1
    assert json.dumps(expected_warning(root_workspace)) in lines[0]


def test_session_says_it_once_at_start(root_workspace: Path) -> None:
    done = hookrunner(root_workspace, "session", stdin="")
    warned = [x for x in done.stderr.splitlines() if "cannot write the workspace" in x]
    ready = done.stderr.splitlines().index("hookrunner: session ready")
    assert len(warned) == 1
    assert json.dumps(expected_warning(root_workspace)) in warned[0]
    assert done.stderr.splitlines().index(warned[0]) < ready


def test_nothing_is_said_when_the_tool_user_can_write(root_workspace: Path) -> None:
    root_workspace.chmod(0o1777)
    done = hookrunner(root_workspace, "session", stdin="")
    assert "cannot write the workspace" not in done.stderr


TABLE = [
    # (owner, mode, tool user, writable)
    ((0, 0), 0o755, NOBODY, False),
    ((0, 0), 0o777, NOBODY, True),
    ((0, 0), 0o1777, NOBODY, True),
    ((0, 0), 0o700, Credentials(0, 0, "root"), True),
    ((0, 65534), 0o775, NOBODY, True),
    ((0, 65534), 0o755, NOBODY, False),
    ((65534, 65534), 0o755, NOBODY, True),
    ((65534, 65534), 0o555, NOBODY, False),
]


def judge(workspace: Path, owner: tuple[int, int], mode: int, user: Credentials) -> bool:
    if owner != (0, 0):
        os.chown(workspace, *owner)
    workspace.chmod(mode)
    return workspace_write_problem(workspace, user) is None


@pytest.mark.parametrize(
    ("owner", "mode", "user", "writable"), [r for r in TABLE if r[0] == (0, 0)]
)
def test_workspace_write_problem(
    root_workspace: Path, owner: tuple[int, int], mode: int, user: Credentials, writable: bool
) -> None:
    assert judge(root_workspace, owner, mode, user) is writable


@pytest.mark.privileged  # chown
@pytest.mark.parametrize(
    ("owner", "mode", "user", "writable"), [r for r in TABLE if r[0] != (0, 0)]
)
def test_workspace_write_problem_by_owner(
    root_workspace: Path, owner: tuple[int, int], mode: int, user: Credentials, writable: bool
) -> None:
    assert judge(root_workspace, owner, mode, user) is writable


def shipped_gates() -> list[tuple[str, str]]:
    compose = (ROOT / "deploy/compose/agents/hooks-scripts/gate.py").read_text()
    documents = yaml.safe_load_all(
        (ROOT / "deploy/kubernetes/demo/sandbox-regular.yaml").read_text()
    )
    kubernetes = next(d["data"]["gate.py"] for d in documents if "gate.py" in d.get("data", {}))
    return [("compose", compose), ("kubernetes", kubernetes)]


@pytest.mark.parametrize(("where", "source"), shipped_gates(), ids=["compose", "kubernetes"])
def test_the_shipped_gate_prints_allow(env: Env, where: str, source: str) -> None:
    gate = env.script(f"{where}-gate.py", source)
    env.hooks({"security-gate": pre_group(rule("code_execution", command(gate)))}, system=True)
    session = env.session()
    allowed = session.pre("code_execution", {"code": "ls -la", "language": "bash"})
    assert allowed.allowed and [r.outcome.value for r in allowed.runs] == ["allow"]
    denied = session.pre("code_execution", {"code": "rm -rf /tmp/x", "language": "bash"})
    assert denied.reason == "Destructive command blocked by security gate."
    assert env.warnings() == []
