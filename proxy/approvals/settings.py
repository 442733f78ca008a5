"""The configuration file's top-level `approvals:` section (docs/configuration.md#approvals):
whether an unknown destination is held, for how long, how many per sandbox, which scopes
an approver may grant, and the ordered approvers.

Parsed once here, called from the loader in one line; problems are reported at
`approvals.<key>` like every other problem of the file. An approver's row is looked up in
`proxy.approvals.approvers.APPROVERS` (one module per kind). A webhook's secret is
resolved like a transform value and never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox_egress.proxy.approvals.approvers import APPROVERS
from sandbox_egress.proxy.approvals.approvers.base import ApproverSpec
from sandbox_egress.proxy.approvals.scopes import ONCE, Scope, duration_s, parse_scope

Report = Callable[[str, str], None]

_KEYS = ("unknown", "timeout", "max_pending", "scopes", "approvers")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_PENDING = 20


@dataclass(frozen=True, slots=True)
class ApprovalsConfig:
    hold: bool = False  # unknown: hold (False: deny, nothing is ever held)
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_pending: int = DEFAULT_MAX_PENDING
    scopes: tuple[Scope, ...] = (ONCE,)
    approvers: tuple[ApproverSpec, ...] = field(default=(), repr=False)

    def scope(self, text: object) -> Scope | None:
        """The scope `text` names when it is one an approver may grant, else None."""
        found = parse_scope(text)
        return found if found is not None and found in self.scopes else None


NO_APPROVALS = ApprovalsConfig()


def parse_approvals(
    document: Any, report: Report, environ: Mapping[str, str] | None = None
) -> ApprovalsConfig:
    """The `approvals:` section of `document` (off without one)."""
    raw = document.get("approvals") if isinstance(document, dict) else None
    if raw is None:
        return NO_APPROVALS
    if not isinstance(raw, dict):
        report("approvals", "must be a mapping (" + ", ".join(_KEYS) + ")")
        return NO_APPROVALS
    for key in raw:
        if key not in _KEYS:
            report(f"approvals.{key}", f"unknown key (expected: {', '.join(_KEYS)})")
    unknown = raw.get("unknown", "deny")
    if unknown not in ("deny", "hold"):
        report("approvals.unknown", "expected deny or hold")
    timeout = duration_s(raw.get("timeout", "60s"), 1, 3600)
    if timeout is None:
        report("approvals.timeout", "expected a duration from 1s to 1h, such as 60s")
    pending = raw.get("max_pending", DEFAULT_MAX_PENDING)
    if isinstance(pending, bool) or not isinstance(pending, int) or not 1 <= pending <= 1000:
        report("approvals.max_pending", "expected an integer from 1 to 1000")
        pending = DEFAULT_MAX_PENDING
    scopes = _scopes(raw.get("scopes", ["once"]), report)
    approvers = _approvers(raw.get("approvers", []), report, environ)
    return ApprovalsConfig(
        unknown == "hold", timeout or DEFAULT_TIMEOUT_S, pending, scopes, approvers
    )


def _scopes(raw: Any, report: Report) -> tuple[Scope, ...]:
    if not isinstance(raw, list) or not raw:
        report("approvals.scopes", "expected a non-empty list of once, session or durations")
        return (ONCE,)
    scopes: list[Scope] = []
    for index, text in enumerate(raw):
        scope = parse_scope(text)
        if scope is None:
            report(f"approvals.scopes[{index}]", "expected once, session or a duration (1s-30d)")
        elif scope not in scopes:
            scopes.append(scope)
    return tuple(scopes) or (ONCE,)


def _approvers(
    raw: Any, report: Report, environ: Mapping[str, str] | None
) -> tuple[ApproverSpec, ...]:
    if not isinstance(raw, list):
        report("approvals.approvers", "expected a list of {command: [...]} or {webhook: {...}}")
        return ()
    specs: list[ApproverSpec] = []
    for index, item in enumerate(raw):
        where = f"approvals.approvers[{index}]"
        kinds = [k for k in APPROVERS if isinstance(item, dict) and k in item]
        if len(kinds) != 1:
            report(where, "expected exactly one of: " + ", ".join(APPROVERS))
            continue
        spec = APPROVERS[kinds[0]].parse(item, where, report, environ)
        if spec is not None:
            specs.append(spec)
    return tuple(specs)
