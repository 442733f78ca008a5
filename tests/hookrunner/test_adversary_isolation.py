"""Issue 11, items 1 and 3: the agent cannot prepare the hooks' environment or read the runner's.

Real interpreters, real uids (``nobody``), real /proc. Some tests need a
workspace that ``nobody`` can enter, so they make one under /tmp (pytest's
own directories are 0700).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_egress.common import contain
from sandbox_egress.hookrunner.enforce.isolation import hook_environment, runner_owned
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.session import HookSession
from tests.hookrunner.helpers import HOOKRUNNER, Env, base_environ

NOBODY = 65534
BASE_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
GATE = 'print(\'{"decision": "deny", "reason": "gate says no"}\')\n'
POISON = "import os\nos._exit(0)\n"  # a gate that imports this exits 0 with no output: allow


def user_site(home: str) -> Path:
    """The user site directory of the base interpreter for a given HOME."""
    done = subprocess.run(
        [BASE_PYTHON, "-c", "import site; print(site.getusersitepackages())"],
        env={"HOME": home, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def gate_hooks(env: Env, matcher: str = "read_file") -> None:
    gate = env.root / "gate.py"
    gate.write_text(GATE)
    command = f"{BASE_PYTHON} {gate}"
    rule = {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}
    env.hooks({"gate": {"pre_tool_execution": [rule]}}, system=True)


def test_the_gate_denies_when_nothing_is_poisoned(env: Env) -> None:
    gate_hooks(env)
    decision = env.session(tool_user="root").pre("read_file", {"path": "x"})
    assert (decision.allowed, decision.reason) == (False, "gate says no")


def test_a_usercustomize_written_into_a_workspace_home_does_not_silence_the_gate(
    env: Env,
) -> None:
    home = env.workspace / "home"
    home.mkdir()
    gate_hooks(env)
    session = env.session(environ=base_environ(HOME=str(home)), tool_user="root")
    site = user_site(str(home)).relative_to(env.workspace)
    wrote = session.exec_tool("write_file", {"path": f"{site}/usercustomize.py", "content": POISON})
    assert wrote.status == "ok"
    decision = session.pre("read_file", {"path": "x"})
    assert (decision.allowed, decision.reason) == (False, "gate says no")


def test_a_usercustomize_written_by_same_uid_code_is_ignored(env: Env, tmp_path: Path) -> None:
    """HOME is runner-owned but the tool runs as the same uid: PYTHONNOUSERSITE=1 still holds."""
    home = tmp_path / "runner-home"
    home.mkdir(mode=0o700)
    gate_hooks(env)
    session = env.session(environ=base_environ(HOME=str(home)), tool_user="root")
    site = user_site(str(home))
    code = f"mkdir -p {site} && printf 'import os\\nos._exit(0)\\n' > {site}/usercustomize.py"
    assert session.exec_tool("code_execution", {"code": code}).status == "ok"
    assert (site / "usercustomize.py").read_text() == POISON
    decision = session.pre("read_file", {"path": "x"})
    assert (decision.allowed, decision.reason) == (False, "gate says no")


def test_what_a_hook_sees(env: Env, tmp_path: Path) -> None:
    seen = env.root / "seen.json"
    dump = env.root / "dump.py"
    dump.write_text(
        "import json, os, sys\n"
        "keys = ('HOME', 'XDG_CONFIG_HOME', 'XDG_STATE_HOME', 'PYTHONNOUSERSITE', 'PATH',"
        " 'PYTHONPYCACHEPREFIX', 'PYTHONWARNINGS')\n"
        f"json.dump({{k: os.environ.get(k) for k in keys}}, open({str(seen)!r}, 'w'))\n"
    )
    command = f"{BASE_PYTHON} {dump}"
    rule = {"hooks": [{"type": "command", "command": command}]}
    env.hooks({"g": {"pre_tool_execution": [rule]}}, system=True)
    state = tmp_path / "state"
    state.mkdir()
    environ = base_environ(
        HOME=str(env.workspace),
        XDG_CONFIG_HOME=str(env.workspace / ".config"),
        XDG_STATE_HOME=str(state),
        PYTHONPYCACHEPREFIX=str(env.workspace / "pyc"),
        PYTHONWARNINGS="ignore::mymodule.Warning",
        PATH=f".:bin::{os.environ['PATH']}",
    )
    env.session(environ=environ, tool_user="root").pre("read_file", {})
    got = json.loads(seen.read_text())
    assert got == {
        "HOME": f"/tmp/hookrunner-home-{os.geteuid()}",
        "XDG_CONFIG_HOME": None,
        "XDG_STATE_HOME": str(state),
        "PYTHONNOUSERSITE": "1",
        "PATH": os.environ["PATH"],
        "PYTHONPYCACHEPREFIX": None,
        "PYTHONWARNINGS": None,
    }


@pytest.mark.parametrize(
    ("make", "owned"),
    [
        ("runner dir 0700", True),
        ("runner dir 0755", True),
        ("world-writable", False),
        ("group-writable", False),
        ("owned by nobody", False),
        ("inside the workspace", False),
        ("the workspace", False),
        ("relative", False),
        ("missing below a world-writable directory", False),
        ("missing below a runner directory", True),
        ("symlink into the workspace", False),
    ],
)
@pytest.mark.privileged
def test_runner_owned(tmp_path: Path, make: str, owned: bool) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = tmp_path / "d"
    if make == "runner dir 0700":
        path.mkdir(mode=0o700)
    elif make == "runner dir 0755":
        path.mkdir()
        path.chmod(0o755)
    elif make in ("world-writable", "group-writable"):
        path.mkdir()
        path.chmod(0o777 if make == "world-writable" else 0o775)
    elif make == "owned by nobody":
        path.mkdir()
        os.chown(path, NOBODY, NOBODY)
    elif make == "inside the workspace":
        path = workspace / "home"
        path.mkdir()
    elif make == "the workspace":
        path = workspace
    elif make == "missing below a world-writable directory":
        path.mkdir()
        path.chmod(0o777)
        path = path / "later"
    elif make == "missing below a runner directory":
        path = path / "later" / "still-later"
    elif make == "symlink into the workspace":
        path.symlink_to(workspace)
    candidate = "d" if make == "relative" else str(path)
    assert runner_owned(candidate, workspace) is owned


def test_hook_environment_keeps_the_sanitised_rest(tmp_path: Path) -> None:
    env = hook_environment({"LANG": "C.UTF-8", "HOME": "/root"}, {"HOME": "/root"}, tmp_path)
    assert env == {"LANG": "C.UTF-8", "HOME": "/root", "PYTHONNOUSERSITE": "1"}


# Different uids: tools as nobody, hooks as root.


@pytest.fixture
def open_ws() -> Iterator[Path]:
    """A workspace nobody can enter and write (and the runner-owned files beside it)."""
    top = Path(tempfile.mkdtemp(prefix="hr-iso-"))
    try:
        top.chmod(0o755)
        workspace = top / "ws"
        workspace.mkdir()
        os.chown(workspace, NOBODY, NOBODY)
        (top / "system.json").write_text("{}")
        yield workspace
    finally:
        shutil.rmtree(top)


def nobody_session(workspace: Path, **environ: str) -> HookSession:
    import io

    return HookSession(
        workspace,
        system_config=workspace.parent / "system.json",
        environ={"PATH": "/usr/bin:/bin", "HOME": "/root", **environ},
        metrics=HookMetrics(),
        stream=io.StringIO(),
    )


@pytest.mark.privileged
def test_tools_run_as_nobody_and_cannot_signal_or_read_the_runner(open_ws: Path) -> None:
    session = nobody_session(open_ws, API_SECRET_TOKEN="s3cret-value-x")
    assert session.tool_user is not None
    assert session.tool_user.uid == NOBODY
    code = (
        "id -u; id -g; kill -0 $PPID 2>/dev/null || echo kill-refused; "
        "cat /proc/$PPID/environ >/dev/null 2>&1 || echo environ-refused; "
        "echo hi > made-by-code.txt"
    )
    result = session.exec_tool("code_execution", {"code": code})
    assert (result.status, result.output) == (
        "ok",
        f"{NOBODY}\n{NOBODY}\nkill-refused\nenviron-refused\n",
    )
    assert (open_ws / "made-by-code.txt").stat().st_uid == NOBODY


@pytest.mark.privileged
def test_files_the_file_tools_create_belong_to_the_tool_user(open_ws: Path) -> None:
    session = nobody_session(open_ws)
    assert session.exec_tool("write_file", {"path": "src/a.txt", "content": "x"}).status == "ok"
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in (open_ws / "src", open_ws / "src/a.txt")}
    assert owners == {(NOBODY, NOBODY)}
    follow_up = session.exec_tool(
        "code_execution", {"code": "echo more >> src/a.txt; cat src/a.txt"}
    )
    assert (follow_up.status, follow_up.output) == ("ok", "xmore\n")


@pytest.mark.privileged
def test_hooks_still_run_as_the_runner(open_ws: Path) -> None:
    seen = open_ws.parent / "hook-uid"
    document = {
        "g": {
            "pre_tool_execution": [{"hooks": [{"type": "command", "command": f"id -u > {seen}"}]}]
        }
    }
    (open_ws.parent / "system.json").write_text(json.dumps(document))
    assert nobody_session(open_ws).exec_tool("code_execution", {"code": "true"}).status == "ok"
    assert seen.read_text() == "0\n"


@pytest.mark.privileged
def test_an_unknown_tool_user_is_a_usage_error(open_ws: Path) -> None:
    done = subprocess.run(
        [
            HOOKRUNNER,
            "exec",
            "code_execution",
            "--workspace",
            str(open_ws),
            "--tool-user",
            "no-such-user-hr",
        ],
        input=b'{"code": "true"}',
        capture_output=True,
        env=base_environ(),
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == "hookrunner: error: tool user 'no-such-user-hr' does not exist\n"


# Item 3: the runner's own environment. Root without capabilities (setpriv) stands for any
# same-uid reader without CAP_SYS_PTRACE; the CLI and the Python API are both checked.

CAPLESS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
PEEK = "tr '\\0' '\\n' < /proc/$PPID/environ | grep -c '^HR_PEEK_TOKEN=' || true"


def test_same_uid_code_cannot_read_the_cli_runners_environ(env: Env) -> None:
    done = subprocess.run(
        [
            *CAPLESS,
            HOOKRUNNER,
            "exec",
            "code_execution",
            "--workspace",
            str(env.workspace),
            "--system-config",
            str(env.system_config),
            "--tool-user",
            "root",
        ],
        input=json.dumps({"code": PEEK}).encode(),
        capture_output=True,
        env=base_environ(HR_PEEK_TOKEN="peek-a-boo-123"),
        timeout=30,
    )
    answer = json.loads(done.stdout)
    assert (answer["output"], "Permission denied" in answer["error"]) == ("0\n", True)
    assert b"peek-a-boo" not in done.stdout


def test_same_uid_code_cannot_read_the_api_runners_environ(env: Env) -> None:
    script = (
        "import io, json, sys\n"
        "from sandbox_egress.hookrunner.session import HookSession\n"
        "from sandbox_egress.hookrunner.metrics import HookMetrics\n"
        f"s = HookSession({str(env.workspace)!r}, system_config={str(env.system_config)!r},"
        " tool_user='root', metrics=HookMetrics(), stream=io.StringIO())\n"
        f"print(json.dumps(s.exec_tool('code_execution', {{'code': {PEEK!r}}}).to_json()))\n"
    )
    done = subprocess.run(
        [*CAPLESS, sys.executable, "-c", script],
        capture_output=True,
        env=base_environ(HR_PEEK_TOKEN="peek-a-boo-123"),
        timeout=30,
        cwd=str(Path(__file__).parents[2]),
    )
    answer = json.loads(done.stdout)
    assert (answer["output"], "Permission denied" in answer["error"]) == ("0\n", True)


# Item 1, second half: a process the agent left behind watches /proc and kills each gate.
# The process group is forced as the only containment here, so the killer does survive its
# code_execution; what stops it is the uid. It only kills processes carrying MARK, and stops
# by itself after 20 s.

MARK = "hr-gate-marker-5f3a"
KILLER = (
    # The mark is assembled at run time, so the killer's own command line does not carry it.
    "setsid sh -c 'm=hr-gate-; m=${m}marker-5f3a; end=$(( $(date +%s) + 20 )); "
    "while [ $(date +%s) -lt $end ]; do "
    "for f in $(grep -ls -- $m /proc/[0-9]*/cmdline); do p=${f#/proc/}; kill -9 ${p%/cmdline}; "
    "done; done' </dev/null >/dev/null 2>&1 & echo $! > killer.pid"
)


@pytest.mark.privileged
def test_a_leftover_process_of_the_tool_user_cannot_kill_the_gates(
    open_ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(contain, "_probed", (contain.PROCESS_GROUP, None))
    gate = f'sleep 1 # {MARK}\necho \'{{"decision": "deny", "reason": "gate says no"}}\''
    rule = {"matcher": "read_file", "hooks": [{"type": "command", "command": gate}]}
    (open_ws.parent / "system.json").write_text(json.dumps({"g": {"pre_tool_execution": [rule]}}))
    session = nobody_session(open_ws)
    assert session.exec_tool("code_execution", {"code": KILLER}).status == "ok"
    killer = int((open_ws / "killer.pid").read_text())
    try:
        assert Path(f"/proc/{killer}").exists()  # it survived: only the uid protects the gate
        decision = session.pre("read_file", {"path": "x"})
        assert (decision.allowed, decision.reason) == (False, "gate says no")
    finally:
        os.kill(killer, 9)


@pytest.mark.privileged
def test_root_tools_still_read_a_non_dumpable_runner(env: Env) -> None:
    """The real outcome for root reading root: CAP_SYS_PTRACE overrides non-dumpable (D45).

    This is why the tool user matters: the same call with the default tool user is refused.
    """
    outputs = []
    for user in (["--tool-user", "root"], []):
        workspace = Path(tempfile.mkdtemp(prefix="hr-iso-peek-"))
        try:
            workspace.chmod(0o755)
            done = subprocess.run(
                [HOOKRUNNER, "exec", "code_execution", "--workspace", str(workspace),
                 "--system-config", str(env.system_config), *user],
                input=json.dumps({"code": PEEK}).encode(),
                capture_output=True,
                env=base_environ(HR_PEEK_TOKEN="peek-a-boo-123"),
                timeout=30,
            )  # fmt: skip
        finally:
            shutil.rmtree(workspace)
        outputs.append(json.loads(done.stdout)["output"])
    assert outputs == ["1\n", "0\n"]
