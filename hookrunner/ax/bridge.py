"""The approvals bridge (`hookrunner.bridge`) where the runner is Claude Code's hook
(``fire``, issue 47, D500): the dialect's side.

``bridge_word``: the bridge's word on a PreToolUse call (``judge``), with why a yes could
not run the grant step here: no boundary (the token could not be masked), or a permission
mode in which no person answers the ``ask`` (D507). Then the ask still names the host, and
says the yes only sends the request on to wait for an operator. ``grant_steps``: the
shell text of each held destination's grant step (``grant.command``), with this
runner's interpreter and package.

Invariants: only ``PreToolUse``; the word of the other events is ``None``.
"""

from __future__ import annotations

import os
import sys

from sandbox_egress.hookrunner.ax.events import EventInput
from sandbox_egress.hookrunner.ax.model import AxEvent
from sandbox_egress.hookrunner.bridge.grant import command
from sandbox_egress.hookrunner.bridge.judge import BridgeWord, judge
from sandbox_egress.hookrunner.bridge.settings import BridgeSettings
from sandbox_egress.hookrunner.enforce.bound import package_root

# Claude Code's permission modes in which an `ask` is answered by a person: not
# bypassPermissions (no prompt: the updatedInput would run unasked), not auto (a classifier
# answers), not dontAsk (refused unasked). D507.
PERSON_ANSWERS = frozenset({"default", "acceptEdits", "plan"})


def bridge_word(
    inp: EventInput | None, settings: BridgeSettings | None, boundary: str
) -> BridgeWord | None:
    if inp is None or settings is None or inp.event is not AxEvent.PRE_TOOL_USE:
        return None
    given = next((m["cwd"] for m in (inp.values, inp.fields, inp.extra) if "cwd" in m), "")
    cwd = given if isinstance(given, str) and os.path.isabs(given) else os.getcwd()
    mode = next(
        (
            m["permission_mode"]
            for m in (inp.values, inp.fields, inp.extra)
            if "permission_mode" in m
        ),
        "default",
    )
    no_grant = None
    if not boundary:
        no_grant = "with no boundary here the admin token cannot be kept from the agent"
    elif mode not in PERSON_ANSWERS:
        no_grant = f"in permission mode {mode!r} the answer may not be a person's"
    return judge(inp.claude_tool, inp.claude_input, settings, os.environ, cwd, no_grant)


def grant_steps(word: BridgeWord, settings: BridgeSettings) -> list[str]:
    root = package_root()
    return [
        command(sys.executable, root, settings.admin, settings.token_file, approval, str(dest))
        for dest, approval in word.held
    ]
