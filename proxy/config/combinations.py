"""An allowlist entry's fields that are valid alone but refused together
(docs/configuration.md): a pass-through entry is not intercepted, so it cannot carry
what needs interception (transforms, secrets, credentials, rules, git, MCP, a budget);
nothing that writes a credential may sit on `*`; a credential is written once. Pure:
the entry's raw mapping in, (field, message) pairs out; `proxy.config` places them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sandbox_egress.proxy.config.patterns import Pattern, PatternKind


def combinations(raw: dict[str, Any], base: Pattern, failed: set[str]) -> Iterator[tuple[str, str]]:
    """Fields valid alone but refused together: (field, message)."""
    if "passthrough" not in failed and raw.get("passthrough") is True and raw.get("transform"):
        yield (
            "passthrough",
            "a pass-through entry is not intercepted, so it cannot have a transform",
        )
    if raw.get("passthrough") is True and (
        "rules" in raw or "deny" in raw or "git" in raw or "mcp" in raw
    ):
        yield (
            "passthrough",
            "a pass-through entry is not intercepted, so its rules could not be applied",
        )
    if raw.get("transform") and base.kind is PatternKind.ANY:
        yield (
            "transform",
            "a transform on '*' would send the credential to every host; name the host",
        )
    if raw.get("secrets") and base.kind is PatternKind.ANY:
        yield ("secrets", "a secret on '*' would go to every host; name the host")
    if "passthrough" not in failed and raw.get("passthrough") is True and raw.get("secrets"):
        yield ("passthrough", "a pass-through entry is not intercepted, so it cannot have secrets")
    if raw.get("credential") and base.kind is PatternKind.ANY:
        yield ("credential", "a credential on '*' would go to every host; name the host")
    if raw.get("passthrough") is True and raw.get("credential"):
        yield ("passthrough", "a pass-through entry is not intercepted: no credential")
    written: Any = raw.get("credential")
    written = written if isinstance(written, dict) else {}
    header = {"bearer": "authorization", "basic": "authorization"}.get(
        str(written.get("as")), str(written.get("header", "")).lower()
    )
    transform: Any = raw.get("transform")
    if header and isinstance(transform, dict) and header in {str(h).lower() for h in transform}:
        yield ("credential", f"the transform already writes {header}; write it once")
    if "passthrough" not in failed and raw.get("passthrough") is True and "budget" in raw:
        yield ("budget", "a pass-through entry is not intercepted, so it has nothing to count")
