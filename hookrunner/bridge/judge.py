"""The bridge's word on one Claude Code PreToolUse call (issue 47, D500-D503).

``judge`` returns ``None`` (nothing to say: the runner's own answer stands), a refusal
(a file tool reaching the admin token, D505, or writing what runs outside the
boundary, D541), or an ``ask`` naming each destination the
egress proxy would hold, with the approval the proxy made for it (``proxyapi.ask_ahead``:
the proxy is the policy view, D502). ``answer.with_bridge`` turns that into Claude Code's
answer; for Bash the user's yes runs the grant step (``grant``), for WebFetch it cannot
(D503): the reason says so.

Invariants: the bridge only ever adds an ``ask`` or a ``deny``, never an allow; a
failure to reach the proxy is "nothing to ask" (the call meets the proxy as without a
bridge); the reason names hosts as the proxy spells them, never a token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.hookrunner.bridge.files import touches, writes_outside
from sandbox_egress.hookrunner.bridge.hosts import Destination, destinations
from sandbox_egress.hookrunner.bridge.proxyapi import ask_ahead
from sandbox_egress.hookrunner.bridge.settings import BridgeSettings

TOKEN_REFUSED = "The egress approvals token is not for Claude Code's tools (hookrunner bridge)."
OUTSIDE_REFUSED = (
    "This file runs outside the command boundary, where the egress approvals token can be "
    "read: Claude Code's tools may not change it while the approvals bridge is on "
    "(hookrunner bridge); edit it yourself."
)


@dataclass(frozen=True)
class BridgeWord:
    """``deny`` with ``reason``, or ``ask`` with ``reason`` and the held destinations."""

    decision: str
    reason: str
    held: tuple[tuple[Destination, str], ...] = ()


def judge(
    tool: str,
    tool_input: Mapping[str, Any],
    settings: BridgeSettings,
    env: Mapping[str, str],
    cwd: str,
    no_grant: str | None,
) -> BridgeWord | None:
    """The bridge's word; ``no_grant``: why a yes cannot run the grant step here (None:
    it can — a Bash call under a boundary that masks the token, a person answering)."""
    if touches(tool, tool_input, settings.protected, cwd):
        return BridgeWord("deny", TOKEN_REFUSED)
    if writes_outside(tool, tool_input, cwd, env):
        return BridgeWord("deny", OUTSIDE_REFUSED)
    held: list[tuple[Destination, str]] = []
    for dest in destinations(tool, tool_input):
        made = ask_ahead(dest.host, dest.port, f"Claude Code {tool}: asked the user", env)
        if made is not None:
            held.append((dest, made.approval))
    if not held:
        return None
    names = ", ".join(str(d) for d, _ in held)
    ids = ", ".join(a for _, a in held)
    if tool != "Bash":
        no_grant = (
            f"Claude Code's {tool} cannot carry your yes to the proxy (a curl through Bash can)"
        )
    if no_grant is None:
        reason = (
            f"This command reaches {names}, which the egress proxy does not allow for this "
            f"sandbox. Yes lets it through once, for this sandbox only (approval {ids})."
        )
        return BridgeWord("ask", reason, tuple(held))
    reason = (
        f"This call reaches {names}, which the egress proxy does not allow for this sandbox. "
        f"Yes sends it on to wait there for an operator's approval ({ids}); {no_grant}."
    )
    return BridgeWord("ask", reason)
