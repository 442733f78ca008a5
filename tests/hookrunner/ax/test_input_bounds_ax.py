"""Issue 20, item 1 in the AX Code / Claude Code dialect: ``fire`` and ``AxSession``.

The example gate crashed on an argument nested 1,200 levels deep and the hook's
failure let the call through; now the payload is refused before any hook runs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.hookrunner.ax.conftest import AxEnv, cc, entry
from tests.hookrunner.helpers import HOOKRUNNER
from tests.hookrunner.test_input_bounds import DEEP, HANG_LIMIT, TOO_DEEP, nested

# The documented gate for this dialect: arguments on stdin, exit 2 blocks.
AX_GATE = """\
import sys, json
data = json.load(sys.stdin)
if "rm -rf" in str(data.get("tool_input", data)):
    print("Destructive command blocked by security gate.", file=sys.stderr)
    sys.exit(2)
"""


@pytest.mark.parametrize("protocol", ["legacy", "claude-code"])
def test_fire_denies_a_payload_the_gate_cannot_read(ax: AxEnv, protocol: str) -> None:
    path = ax.root / "gate.py"
    path.write_text(AX_GATE)
    gate = f"python3 {shlex.quote(str(path))}"
    hook = cc("PreToolUse", gate) if protocol == "claude-code" else entry("PreToolUse", gate)
    ax.hooks({"hooks": [hook]})
    payload = {"tool": "bash", "args": {"command": "rm -rf /", "x": nested(DEEP)}}
    done = subprocess.run(
        [
            HOOKRUNNER,
            "fire",
            "PreToolUse",
            "--workspace",
            str(ax.workspace),
            "--trust-project-hooks",
        ],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=ax.environ(),
        timeout=HANG_LIMIT,
    )
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {
        "event": "PreToolUse",
        "decision": "deny",
        "cause": "input_refused",
        "reason": TOO_DEEP,
    }


def test_ax_session_refuses_before_any_hook(ax: AxEnv, tmp_path: Path) -> None:
    ran = tmp_path / "hook-ran"
    ax.hooks({"hooks": [entry("PreToolUse", f"touch {ran}"), entry("PostToolUse", f"touch {ran}")]})
    session = ax.session()
    refused = session.fire("PreToolUse", {"tool": "bash", "args": {"x": nested(100_000)}})
    assert (refused.decision.value, refused.cause.value, refused.reason) == (
        "deny",
        "input_refused",
        TOO_DEEP,
    )
    after = session.fire("PostToolUse", {"tool": "bash", "args": {}, "output": nested(DEEP)})
    assert (after.decision.value, after.cause.value) == ("allow", "input_refused")
    assert not ran.exists()
    assert (
        ax.metrics.value(
            "hook_lifecycle_decisions_total",
            event="PreToolUse",
            decision="deny",
            cause="input_refused",
        )
        == 1
    )
