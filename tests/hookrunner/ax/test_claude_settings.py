"""Claude Code's settings files read as they are, and the runner as Claude Code's hook command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.model import OBSERVATION_EVENTS, AxEvent
from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.test_claude_output import CLAUDE_OUTPUT
from tests.hookrunner.helpers import HOOKRUNNER

PAYLOADS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "claude" / "payloads.json").read_text()
)
BLOCK_RM = (
    "import json, sys\n"
    "d = json.load(sys.stdin)\n"
    "open(sys.argv[1], 'a').write(d['hook_event_name'] + '\\n')\n"
    "if 'rm -rf' in d.get('tool_input', {}).get('command', ''):\n"
    "    print('rm -rf is not allowed here', file=sys.stderr); sys.exit(2)\n"
)


def settings(*pairs: tuple[str, str, str], **keys: Any) -> dict[str, Any]:
    """{"hooks": {EVENT: [{"matcher": M, "hooks": [{"type": "command", "command": C}]}]}}."""
    hooks: dict[str, list[Any]] = {}
    for event, matcher, command in pairs:
        group = {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}
        hooks.setdefault(event, []).append(group)
    return {"hooks": hooks, **keys}


class Claude:
    """A home, a managed file and the workspace's .claude directory around an AxEnv."""

    def __init__(self, ax: AxEnv) -> None:
        self.ax = ax
        self.home = ax.root / "home"
        self.managed = ax.root / "etc" / "managed-settings.json"
        self.log = ax.root / "ran.log"
        self.blocker = ax.script("block_rm.py", BLOCK_RM) + f" {self.log}"

    def write(self, where: str, document: Any) -> Path:
        path = {
            "user": self.home / ".claude" / "settings.json",
            "project": self.ax.workspace / ".claude" / "settings.json",
            "local": self.ax.workspace / ".claude" / "settings.local.json",
            "managed": self.managed,
        }[where]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document))
        return path

    def fire(self, event: str, payload: Any, *flags: str, env: dict[str, str] | None = None):
        return subprocess.run(
            [HOOKRUNNER, "fire", event, "--workspace", str(self.ax.workspace), *flags],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env or self.ax.environ(HOME=str(self.home)),
            timeout=60,
        )

    def validate(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HOOKRUNNER, "validate", "--workspace", str(self.ax.workspace), *flags],
            capture_output=True,
            text=True,
            env=self.ax.environ(HOME=str(self.home)),
            timeout=60,
        )

    def runs(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    def session(self, **kwargs: Any):
        kwargs.setdefault("managed_settings", self.managed)
        return self.ax.session(environ=self.ax.environ(HOME=str(self.home)), **kwargs)


@pytest.fixture
def claude(ax: AxEnv) -> Claude:
    return Claude(ax)


BASH_RM = {"tool_name": "Bash", "tool_input": {"command": "rm -rf build"}}


def test_a_user_settings_file_runs_as_it_is_other_keys_ignored(claude: Claude) -> None:
    claude.write(
        "user",
        settings(
            ("PreToolUse", "Bash", claude.blocker),
            model="opus",
            permissions={"allow": ["Bash(ls)"]},
            env={"X": "1"},
        ),
    )
    done = claude.fire("PreToolUse", BASH_RM)
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "exit_2",
        "reason": "rm -rf is not allowed here",
        "source": "user settings hooks.PreToolUse[0].hooks[0]",
    }
    assert "warning" not in done.stderr
    assert claude.runs() == ["PreToolUse"]


def test_project_settings_run_only_when_trusted(claude: Claude) -> None:
    claude.write("project", settings(("PreToolUse", "Bash", claude.blocker)))
    untrusted = claude.fire("PreToolUse", BASH_RM)
    assert json.loads(untrusted.stdout)["cause"] == "no_hooks"
    assert "settings.json: project hooks are off" in untrusted.stderr
    assert claude.fire("PreToolUse", BASH_RM, "--trust-project-hooks").returncode == 1


def test_a_home_inside_the_workspace_is_the_repository_s(claude: Claude) -> None:
    claude.home = claude.ax.workspace
    claude.write("user", settings(("PreToolUse", "Bash", claude.blocker)))
    done = claude.fire("PreToolUse", BASH_RM)
    assert (done.returncode, claude.runs()) == (0, [])
    assert "$HOME is inside the workspace" in done.stderr


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda path: path.parent.chmod(0o777), "which someone other than the runner's user"),
        (lambda path: path.chmod(0o666), "is writable by group or others (mode 0666)"),
        (lambda path: path.parent.parent.chmod(0o757), "which someone other than the runner's"),
    ],
    ids=["directory writable", "file writable", "home writable"],
)
def test_a_user_settings_file_others_could_write_is_ignored(
    claude: Claude, spoil: Any, why: str
) -> None:
    """Its hooks would run as the runner (root), so a tool user's edit must not count (D191)."""
    path = claude.write("user", settings(("PreToolUse", "Bash", claude.blocker)))
    spoil(path)
    done = claude.fire("PreToolUse", BASH_RM)
    assert (done.returncode, claude.runs()) == (0, [])
    assert f"{path}: ignored: it " in done.stderr
    assert why in done.stderr
    assert done.stderr.count("ignored: it") == 1


@pytest.mark.privileged
def test_a_user_settings_file_owned_by_the_tool_user_is_ignored(claude: Claude) -> None:
    path = claude.write("user", settings(("PreToolUse", "Bash", claude.blocker)))
    os.chown(path, 65534, 65534)
    done = claude.fire("PreToolUse", BASH_RM)
    assert (done.returncode, claude.runs()) == (0, [])
    assert f"{path}: ignored: it is owned by uid 65534, not by the runner's user or root" in (
        done.stderr
    )


def test_managed_only_runs_managed_hooks_and_reports_the_others(claude: Claude) -> None:
    claude.write(
        "managed",
        settings(("PreToolUse", "*", claude.blocker), allowManagedHooksOnly=True),
    )
    claude.write("user", settings(("PreToolUse", "*", "exit 2")))
    claude.write("local", settings(("PreToolUse", "*", "exit 2")))
    session = claude.session()
    result = session.fire("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}})
    assert (result.decision.value, result.cause.value) == ("allow", "allowed")
    assert claude.runs() == ["PreToolUse"]
    causes = [w["cause"] for w in claude.ax.warnings() if w["kind"] == "config"]
    assert sum("allowManagedHooksOnly is set" in c for c in causes) == 2


@pytest.mark.parametrize(
    ("files", "runs"),
    [
        ({"managed": {"disableAllHooks": True}, "user": {}}, []),
        ({"managed": {}, "user": {"disableAllHooks": True}}, ["managed"]),
        (
            {"user": {"disableAllHooks": True}, "local": {"disableAllHooks": False}},
            ["user", "local"],
        ),
        ({"local": {"disableAllHooks": True}, "user": {"disableAllHooks": False}}, []),
        (
            {"managed": {}, "user": {}, "project": {}, "local": {}},
            ["managed", "user", "project", "local"],
        ),
    ],
)
def test_claude_code_precedence_of_disable_all_hooks(
    claude: Claude, files: dict[str, dict[str, Any]], runs: list[str]
) -> None:
    marker = claude.ax.script(
        "mark.py", "import sys\nopen(sys.argv[1], 'a').write(sys.argv[2] + '\\n')\n"
    )
    for where, keys in files.items():
        claude.write(where, settings(("Stop", "", f"{marker} {claude.log} {where}"), **keys))
    claude.session().fire("Stop", {})
    assert claude.runs() == runs


def test_validate_warns_of_what_only_claude_code_runs_and_passes(claude: Claude) -> None:
    """An ordinary settings file with a Notification hook: a warning, not a failure."""
    claude.write(
        "user",
        settings(("Notification", "", "notify-send hi"), ("PreToolUse", "Bash", "true")),
    )
    done = claude.validate()
    assert done.returncode == 0, done.stdout
    (line,) = done.stdout.splitlines()
    assert (
        line.startswith("warning: ") and "$.hooks.Notification: this runner does not fire" in line
    )


def test_validate_reports_settings_problems_with_their_location(claude: Claude) -> None:
    path = claude.write(
        "user",
        {
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash(npm test)",
                        "hooks": [
                            {"type": "prompt", "prompt": "Is this safe?"},
                            {"type": "agent", "prompt": "Check it"},
                            {"type": "command", "command": "true", "timeout": 0},
                            {"type": "command"},
                        ],
                    }
                ],
                "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
                "Stop": {"hooks": []},
            },
            "allowManagedHooksOnly": True,
            "disableAllHooks": "yes",
        },
    )
    done = claude.validate()
    assert done.returncode == 1
    lines = [line.removeprefix("warning: ").split(": ", 2)[1:] for line in done.stdout.splitlines()]
    assert [path for path, _ in lines] == [
        "$.disableAllHooks",
        "$.allowManagedHooksOnly",
        "$.hooks.PreToolUse[0].matcher",
        "$.hooks.PreToolUse[0].hooks[0].type",
        "$.hooks.PreToolUse[0].hooks[1].type",
        "$.hooks.PreToolUse[0].hooks[2].timeout",
        "$.hooks.PreToolUse[0].hooks[3].command",
        "$.hooks.Notification",
        "$.hooks.Stop",
    ]
    assert all(
        line.removeprefix("warning: ").startswith(f"{path}: ") for line in done.stdout.splitlines()
    )
    warned = [line.split(": ", 3)[2] for line in done.stdout.splitlines() if line.startswith("w")]
    assert warned == [
        "$.hooks.PreToolUse[0].hooks[0].type",
        "$.hooks.PreToolUse[0].hooks[1].type",
        "$.hooks.Notification",
    ]
    reasons = dict((p, r) for p, r in lines)
    assert "a prompt hook asks a model" in reasons["$.hooks.PreToolUse[0].hooks[0].type"]
    assert "never runs" in reasons["$.hooks.PreToolUse[0].hooks[1].type"]
    assert "does not fire 'Notification'" in reasons["$.hooks.Notification"]
    assert "only the managed settings file" in reasons["$.allowManagedHooksOnly"]


SETTINGS_HERE = "this is Claude Code's settings format"


def test_a_settings_file_where_a_hooks_json_belongs_is_recognised(claude: Claude) -> None:
    document = settings(("PreToolUse", "Bash", "exit 2"))
    (claude.ax.workspace / ".agents").mkdir()
    for path in (
        claude.ax.workspace / ".agents" / "hooks.json",
        claude.ax.hooks_file,
        claude.ax.root / "operator.json",
    ):
        path.write_text(json.dumps(document))
    done = claude.validate("--ax-config", str(claude.ax.root / "operator.json"))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert all(f": $.hooks: {SETTINGS_HERE}; " in line for line in lines)


# --- the runner as Claude Code's hook command -----------------------------------------


def wired(claude: Claude, event: str) -> str:
    """The command of a settings.json entry that makes the runner Claude Code's hook."""
    operator = claude.ax.root / "operator-ax.json"
    operator.write_text(
        json.dumps(
            {
                "hooks": [
                    {"event": e, "command": claude.blocker, "protocol": "claude-code"}
                    for e in PAYLOADS
                ]
            }
        )
    )
    return (
        f"{HOOKRUNNER} fire {event} --claude-exit-codes --workspace {claude.ax.workspace} "
        f"--ax-config {operator}"
    )


def as_claude_code_runs(claude: Claude, command: str, payload: Any) -> subprocess.CompletedProcess:
    """Claude Code runs a command hook: /bin/sh -c COMMAND, the payload on stdin."""
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=claude.ax.environ(HOME=str(claude.home)),
        timeout=60,
    )


@pytest.mark.parametrize("event", sorted(PAYLOADS))
def test_claude_exit_codes_for_every_event_with_recorded_payloads(
    claude: Claude, event: str
) -> None:
    """Claude Code validates a stdout that starts with `{` against its hook-output schema:
    the runner prints nothing, or a document of that schema, for every recorded event."""
    claude.write("user", settings((event, "", wired(claude, event))))
    entry = json.loads((claude.home / ".claude" / "settings.json").read_text())
    command = entry["hooks"][event][0]["hooks"][0]["command"]
    done = as_claude_code_runs(claude, command, PAYLOADS[event])
    if done.stdout.strip():
        CLAUDE_OUTPUT.validate(json.loads(done.stdout))
    if event == "PreToolUse":  # the recorded payload is `rm -rf /`
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr.splitlines()[-1] == "rm -rf is not allowed here"
    else:
        assert done.returncode == 0
    ran = claude.runs()
    # The user file itself was not read again: the operator's hook ran once (or, for an
    # event whose payload says it does not fire, not at all).
    assert ran == [event] or (ran == [] and AxEvent(event) in OBSERVATION_EVENTS)


def test_claude_exit_codes_errors_block_only_events_that_can_block(claude: Claude) -> None:
    pre = claude.fire("PreToolUse", {"tool_name": 3}, "--claude-exit-codes")
    assert pre.returncode == 2
    assert '"tool_name" must be a non-empty string' in pre.stderr
    stop = claude.fire("Stop", {"stop_hook_active": "no"}, "--claude-exit-codes")
    assert stop.returncode == 1


def test_a_user_entry_that_invokes_the_runner_does_not_recurse(claude: Claude) -> None:
    """A runtime fires PreToolUse; the user's settings hold an entry that is the runner."""
    claude.write("user", settings(("PreToolUse", "*", wired(claude, "PreToolUse"))))
    done = claude.fire("PreToolUse", BASH_RM)
    assert done.returncode == 1
    assert json.loads(done.stdout)["reason"].endswith("rm -rf is not allowed here")
    assert claude.runs() == ["PreToolUse"]  # the operator's hook ran once, in the nested runner


def test_a_nested_runner_without_claude_mode_reads_no_settings_either(claude: Claude) -> None:
    again = f"{HOOKRUNNER} fire PreToolUse --workspace {claude.ax.workspace}"
    claude.write("user", settings(("PreToolUse", "*", again), ("PreToolUse", "*", claude.blocker)))
    done = claude.fire("PreToolUse", BASH_RM)
    # It terminates: the nested runner read no settings file and allowed; its JSON answer is
    # not a Claude Code answer ("decision": "allow"), so the outer runner blocks on it.
    assert (done.returncode, json.loads(done.stdout)["cause"]) == (1, "malformed_output")
    assert claude.runs() == []
    nested = claude.fire(
        "PreToolUse", BASH_RM, env=claude.ax.environ(HOME=str(claude.home), HOOK_EVENT="PreToolUse")
    )
    assert json.loads(nested.stdout)["cause"] == "no_hooks"
    assert "HOOK_EVENT is set" in nested.stderr


def test_managed_settings_flag_names_the_file_and_a_missing_one_is_a_problem(
    claude: Claude,
) -> None:
    claude.write("managed", settings(("PreToolUse", "Bash", claude.blocker)))
    assert (
        claude.fire("PreToolUse", BASH_RM, "--managed-settings", str(claude.managed)).returncode
        == 1
    )
    missing = claude.fire(
        "PreToolUse", BASH_RM, "--managed-settings", str(claude.ax.root / "missing.json")
    )
    assert missing.returncode == 0
    assert "missing.json" in missing.stderr


@pytest.mark.parametrize(
    ("matcher", "tool", "fires"),
    [
        ("mcp__github__.*", "mcp__github__create_issue", True),
        ("mcp__github__.*", "mcp__memory__create_entities", False),
        ("mcp__memory", "mcp__memory__create_entities", True),
        ("mcp__memory", "mcp__memory_bank__read", False),
        ("mcp__.*", "mcp__memory__create_entities", True),
        ("mcp__memory__create_entities", "mcp__memory__create_entities", True),
    ],
)
def test_mcp_tools_fire_pre_tool_use_with_matchers_as_users_write_them(
    claude: Claude, matcher: str, tool: str, fires: bool
) -> None:
    claude.write("user", settings(("PreToolUse", matcher, claude.blocker)))
    done = claude.fire("PreToolUse", {"tool_name": tool, "tool_input": {"command": "rm -rf x"}})
    assert done.returncode == (1 if fires else 0)
    assert claude.runs() == (["PreToolUse"] if fires else [])


@pytest.mark.parametrize("switch", ["allowManagedHooksOnly", "disableAllHooks"])
def test_managed_switches_skip_the_project_ax_file_never_the_operator_s(
    claude: Claude, switch: str
) -> None:
    marker = claude.ax.script(
        "mark2.py", "import sys\nopen(sys.argv[1], 'a').write(sys.argv[2] + '\\n')\n"
    )
    claude.ax.hooks({"hooks": [{"event": "Stop", "command": f"{marker} {claude.log} project-ax"}]})
    operator = claude.ax.root / "operator.json"
    operator.write_text(
        json.dumps({"hooks": [{"event": "Stop", "command": f"{marker} {claude.log} operator"}]})
    )
    claude.write("managed", {switch: True})
    claude.session(operator_config=operator).fire("Stop", {})
    assert claude.runs() == ["operator"]
    causes = [w["cause"] for w in claude.ax.warnings() if w["kind"] == "config"]
    assert any(f"hooks are skipped: {switch} is set" in c for c in causes)


STOP_BLOCKER = (
    "import json, sys\n"
    "json.load(sys.stdin)\n"
    "print(json.dumps({'decision': 'block', 'reason': 'the tests fail: run them again'}))\n"
)


@pytest.mark.parametrize("event", ["Stop", "SubagentStop"])
def test_a_stop_hooks_block_is_claude_codes_block(claude: Claude, event: str) -> None:
    """Claude Code honours a Stop hook's {"decision": "block"} (it keeps working); in
    Claude Code mode the runner says so in Claude Code's words (D228)."""
    operator = claude.ax.root / "operator-stop.json"
    hook = claude.ax.script("stop_block.py", STOP_BLOCKER)
    operator.write_text(
        json.dumps({"hooks": [{"event": event, "command": hook, "protocol": "claude-code"}]})
    )
    done = claude.fire(event, PAYLOADS[event], "--claude-exit-codes", "--ax-config", str(operator))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    CLAUDE_OUTPUT.validate(answer)
    assert answer == {"decision": "block", "reason": "the tests fail: run them again"}
    # Without Claude Code mode the AX dialect keeps its rule: Stop cannot block.
    plain = claude.fire(event, PAYLOADS[event], "--ax-config", str(operator))
    assert (plain.returncode, json.loads(plain.stdout)["decision"]) == (0, "allow")
