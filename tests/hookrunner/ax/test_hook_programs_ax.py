"""Issue 20, item 3 in the AX Code / Claude Code dialect: a planted ``python3`` on a
workspace ``PATH`` entry does not replace the gate (the kernel filters for both dialects)."""

from __future__ import annotations

from tests.hookrunner.ax.conftest import AxEnv
from tests.hookrunner.test_hook_programs import plant


def test_the_ax_dialect_filters_the_same_way(ax: AxEnv) -> None:
    planted = plant(ax.workspace / ".venv" / "bin")
    gate = ax.root / "gate.py"
    gate.write_text("import sys\nprint('no', file=sys.stderr)\nsys.exit(2)\n")
    ax.hooks(
        {
            "hooks": [
                {"event": "PreToolUse", "command": f"python3 {gate}", "protocol": "claude-code"}
            ]
        }
    )
    environ = ax.environ(PATH=f"{planted.parent}:/usr/bin:/bin")
    result = ax.session(environ=environ).fire("PreToolUse", {"tool": "bash", "args": {}})
    assert (result.decision.value, result.reason) == ("deny", "no")
