"""The `mcp` clause's row (docs/configuration.md#mcp-servers): an entry's `mcp:` parsed
by `proxy.mcp.policy`, and the head rule that hands an allowed request's MCP policies
(the entry's and, for a sandbox, its node's) to the adapter (`addons.clauses.mcp`),
which judges its messages (D330-D336)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandbox_egress.proxy.clauses.base import Head, Report, Ruling
from sandbox_egress.proxy.mcp import entry_policies
from sandbox_egress.proxy.mcp.policy import parse_mcp


def parse(
    raw: Mapping[str, Any], where: str, report: Report, failed: frozenset[str]
) -> tuple[bool, dict[str, Any]]:
    ok, policy = parse_mcp(raw.get("mcp"), f"{where}.mcp", report)
    return ok, {"mcp": policy}


def head(ask: Head) -> Ruling:
    return Ruling(ask.decision, entry_policies(ask.decision) or None)
