"""The approvers' one small interface (the table of kinds is the package's `APPROVERS`,
docs/configuration.md#approvals).

A kind parses its row of `approvals.approvers` into an `Approver`; the service
(`proxy.approvals.service`) asks each approver in order with the approval's JSON document
and takes the first `Answer`:

* `allow`/`deny` (with a scope and a reason) decides;
* `pending` means "asked": someone will answer through the admin API; no later approver
  is asked (D484);
* None is no answer (a crash, a hang, a refusal, unreadable output): the next is asked.

Invariant: `ask` never raises for anything the approver does, and is bounded in time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Report = Callable[[str, str], None]

DECISIONS = ("allow", "deny", "pending")
MAX_REASON = 200


@dataclass(frozen=True, slots=True)
class Answer:
    decision: str  # one of DECISIONS
    scope: str | None = None  # as the approver wrote it; checked against `scopes`
    reason: str = ""


class Approver(Protocol):
    @property
    def kind(self) -> str: ...

    async def ask(self, approval: Mapping[str, Any]) -> Answer | None: ...


ApproverSpec = Approver


class Kind(Protocol):
    def parse(
        self, item: dict[str, Any], where: str, report: Report, environ: Mapping[str, str] | None
    ) -> Approver | None: ...


def answer_of(document: Any) -> Answer | None:
    """An approver's JSON answer as an `Answer`, or None when it is not one."""
    if not isinstance(document, dict):
        return None
    decision, scope, reason = (
        document.get("decision"),
        document.get("scope"),
        document.get("reason", ""),
    )
    if decision not in DECISIONS or not isinstance(reason, str):
        return None
    if scope is not None and not isinstance(scope, str):
        return None
    return Answer(decision, scope, reason[:MAX_REASON])
