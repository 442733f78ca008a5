"""`hookrunner claude install` carries the user's hooks faithfully (issue 44, D390-D394).

Claude Code is played as in test_claude_install (the real CLI is in test_claude_cli): for
each event, `/bin/sh -c COMMAND` of each installed entry, the event's payload on stdin,
stdout validated against Claude Code's hook-output schema. Each case is what the same
hook, run by Claude Code alone, would have told Claude Code; before issue 44 the runner
turned `ask` into a deny, dropped `updatedInput`, blocked instead of stopping on
`continue: false`, never ran a SessionStart matcher `startup` nor carried its context, put
its own command line before every block reason (exit 2), and failed open (exit 127) when
its installation was gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.hookrunner.ax.firebound import boundary_here
from sandbox_egress.hookrunner.enforce.bound import original
from testbed.claude_code import stop_warm_runners
from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.ax.test_claude_install import Installed, install
from tests.hookrunner.ax.test_claude_output import CLAUDE_OUTPUT
from tests.hookrunner.ax.test_claude_settings import PAYLOADS, settings


@pytest.fixture
def claude(ax: AxEnv) -> Iterator[Installed]:
    installed = Installed(ax)
    yield installed
    stop_warm_runners(installed.run_dir)
    shutil.rmtree(installed.run_dir, ignore_errors=True)


ANSWERS = (
    "import json, sys\n"
    "d = json.load(sys.stdin)\n"
    "open(sys.argv[1], 'a').write(d['hook_event_name'] + ' ' + d.get('source', '') + '\\n')\n"
    "if d['hook_event_name'] == 'SessionStart':\n"
    "    print(json.dumps({'hookSpecificOutput': {'hookEventName': 'SessionStart',\n"
    "                      'additionalContext': 'context for ' + d['source']}}))\n"
    "    sys.exit(0)\n"
    "c = d['tool_input']['command']\n"
    "out = {'hookEventName': 'PreToolUse'}\n"
    "if 'rewrite' in c:\n"
    "    out.update(permissionDecision='allow', updatedInput={'command': 'echo rewritten'})\n"
    "elif 'confirm' in c:\n"
    "    out.update(permissionDecision='ask', permissionDecisionReason='please confirm')\n"
    "elif 'forbid' in c:\n"
    "    print('forbidden by the user\\'s policy', file=sys.stderr); sys.exit(2)\n"
    "elif 'halt' in c:\n"
    "    print(json.dumps({'continue': False, 'stopReason': 'halted by the user', \n"
    "                      'systemMessage': 'the user said stop'})); sys.exit(0)\n"
    "print(json.dumps({'hookSpecificOutput': out}))\n"
)


def bash(command: str) -> dict[str, Any]:
    return {**PAYLOADS["PreToolUse"], "tool_input": {"command": command}}


def installed_with_answers(claude: Installed, *more: tuple[str, str, str]) -> Path:
    hook = claude.ax.script("answers.py", ANSWERS) + f" {claude.log}"
    path = claude.write(
        "user", settings(("PreToolUse", "Bash", hook), ("SessionStart", "startup", hook), *more)
    )
    done = install(claude, "install")
    assert done.returncode == 0, done.stderr
    return path


def fire(claude: Installed, event: str, payload: dict[str, Any], env: dict[str, str] | None = None):
    """Claude Code running the one installed entry of `event` (the runner's)."""
    fired.append(dict(payload.get("tool_input") or {}))
    document = json.loads((claude.home / ".claude" / "settings.json").read_text())
    ((group,),) = [document["hooks"][event]]
    ((hook,),) = [group["hooks"]]
    ran = subprocess.run(
        ["/bin/sh", "-c", hook["command"]],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env or claude.env,
        cwd=claude.ax.workspace,
        timeout=60,
    )
    if ran.returncode == 0 and ran.stdout.strip():
        CLAUDE_OUTPUT.validate(json.loads(ran.stdout))
    return ran


def answer(ran: subprocess.CompletedProcess[str]) -> Any:
    """The runner's answer, with a command it put under the boundary read back (D380):
    an `updatedInput` that only bounds the fired command itself is left out, so that each
    test compares what the user's hooks said. `bounded` has what the boundary wrapped."""
    assert ran.returncode == 0, ran.stderr
    document = json.loads(ran.stdout) if ran.stdout.strip() else None
    specific = document.get("hookSpecificOutput") if isinstance(document, dict) else None
    given = specific.get("updatedInput") if isinstance(specific, dict) else None
    command = given.get("command") if isinstance(given, dict) else None
    text = original(command) if isinstance(command, str) else None
    if text is not None:
        bounded.append(text)
        given["command"] = text
        if given == fired[-1]:
            del specific["updatedInput"]
    return document


fired: list[dict[str, Any]] = []  # the tool input of each PreToolUse fired
bounded: list[str] = []  # each command an answer put under the boundary


def test_ask_reaches_claude_code_as_ask(claude: Installed) -> None:
    installed_with_answers(claude)
    assert answer(fire(claude, "PreToolUse", bash("echo confirm"))) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": "please confirm",
        }
    }


def test_an_ask_carries_the_command_under_the_boundary(claude: Installed) -> None:
    """The user's yes runs the command: it goes under the boundary like an allowed one."""
    installed_with_answers(claude)
    del bounded[:]
    assert (
        answer(fire(claude, "PreToolUse", bash("echo confirm")))["hookSpecificOutput"][
            "permissionDecision"
        ]
        == "ask"
    )
    assert bounded == (["echo confirm"] if boundary_here(os.environ) else [])


def test_updated_input_reaches_claude_code(claude: Installed) -> None:
    installed_with_answers(claude)
    assert answer(fire(claude, "PreToolUse", bash("echo rewrite"))) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": {"command": "echo rewritten"},
        }
    }


def test_a_block_reason_is_the_hooks_own_text(claude: Installed) -> None:
    """No command line before it: a JSON deny, whose reason Claude Code shows as it is."""
    installed_with_answers(claude)
    assert answer(fire(claude, "PreToolUse", bash("echo forbid"))) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "forbidden by the user's policy",
        }
    }


def test_continue_false_stops_claude_with_the_hooks_reason(claude: Installed) -> None:
    installed_with_answers(claude)
    assert answer(fire(claude, "PreToolUse", bash("echo halt"))) == {
        "continue": False,
        "stopReason": "halted by the user",
        "systemMessage": "the user said stop",
    }


def test_session_start_matcher_and_context(claude: Installed) -> None:
    installed_with_answers(claude)
    started = {**PAYLOADS["SessionStart"], "source": "startup"}
    assert answer(fire(claude, "SessionStart", started)) == {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": "context for startup",
        }
    }
    resumed = {**PAYLOADS["SessionStart"], "source": "resume"}
    assert answer(fire(claude, "SessionStart", resumed)) is None  # `startup` does not match
    assert claude.log.read_text().splitlines() == ["SessionStart startup"]


def test_what_cannot_be_carried_is_named_before_anything_changes(claude: Installed) -> None:
    """A prompt hook, an async hook: listed, exit 1, no file touched; with --force they stay
    in settings.json, where Claude Code runs them itself, and the rest moves."""
    original = settings(
        ("PreToolUse", "Bash", "true"),
        ("Stop", "", "true"),
        ("Notification", "", "notify-send hi"),
    )
    original["hooks"]["PreToolUse"][0]["hooks"].append({"type": "prompt", "prompt": "Safe?"})
    original["hooks"]["Stop"][0]["hooks"][0]["async"] = True
    path = claude.write("user", original)
    refused = install(claude, "install")
    assert refused.returncode == 1
    assert "$.hooks.PreToolUse[0].hooks[1]: a prompt hook" in refused.stderr
    assert "$.hooks.Stop[0].hooks[0]: async" in refused.stderr
    assert "--force" in refused.stderr
    assert json.loads(path.read_text()) == original
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]

    forced = install(claude, "install", "--force")
    assert forced.returncode == 0, forced.stderr
    document = json.loads(path.read_text())["hooks"]
    assert document["Notification"] == original["hooks"]["Notification"]
    kept = [g for g in document["PreToolUse"] if g["matcher"] == "Bash"]
    assert kept == [{"matcher": "Bash", "hooks": [{"type": "prompt", "prompt": "Safe?"}]}]
    assert [g for g in document["Stop"] if g["matcher"] == ""][-1]["hooks"][0]["async"] is True
    assert install(claude, "uninstall").returncode == 0
    assert handlers(json.loads(path.read_text())) == handlers(original)


def handlers(document: dict[str, Any]) -> dict[str, list[str]]:
    """Each event's (matcher, handler) pairs, whatever the groups that hold them."""
    return {
        event: sorted(json.dumps([g["matcher"], h]) for g in groups for h in g["hooks"])
        for event, groups in document["hooks"].items()
    }


def test_the_installed_command_fails_closed_when_the_runner_is_gone(claude: Installed) -> None:
    """The clone's .venv disappears: every path of the installation in the command leads
    nowhere. A PreToolUse call is blocked (exit 2, a reason), never exit 127."""
    path = installed_with_answers(claude)
    venv = str(Path(sys.executable).parent.parent)
    gone = path.read_text().replace(venv, venv + "-gone")
    path.write_text(gone)
    ran = fire(claude, "PreToolUse", bash("git push --force"))
    assert ran.returncode == 2
    assert "hookrunner" in ran.stderr and "blocked" in ran.stderr


def test_continue_false_of_a_stop_hook_stops_claude(claude: Installed) -> None:
    """Claude Code: `continue: false` stops Claude, before any `decision`. The runner read
    it as a Stop hook asking to block, which keeps Claude working: the opposite."""
    stop = 'echo \'{"continue": false, "stopReason": "enough for today"}\''
    claude.write("user", settings(("Stop", "", stop)))
    assert install(claude, "install").returncode == 0
    assert answer(fire(claude, "Stop", PAYLOADS["Stop"])) == {
        "continue": False,
        "stopReason": "enough for today",
    }
