"""The open approvals of one proxy process: one per (sandbox, host, port), however many
requests wait on it (docs/configuration.md#approvals).

Pure bookkeeping on the event loop (no I/O): `open` finds the destination's pending
approval or opens one (None past `max_pending` of that sandbox), `decide` answers one
once and wakes every request waiting on it. Decided approvals are kept, newest last, up
to `KEPT`, so `GET /approvals` and `GET /v1/access-requests/{id}` can still tell them.

Invariants: an approval is decided at most once (`AlreadyDecided` after); a decided one
is no longer the destination's open approval, so the next request opens a new one; an
id is unguessable (`secrets.token_hex`): an access request's id is a sandbox's handle.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sandbox_egress.proxy.approvals.scopes import Scope

KEPT = 1000  # decided approvals remembered for the API


class State(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    TIMED_OUT = "timed_out"


class Source(StrEnum):
    REQUEST = "request"  # a held request
    ACCESS_REQUEST = "access_request"  # POST /v1/access-requests from the sandbox
    API = "api"  # POST /approvals: a grant made ahead


class AlreadyDecided(Exception):
    """The approval was answered (or lapsed) before."""


Destination = tuple[str | None, str, int]  # (sandbox, host, port)


@dataclass(eq=False)
class Approval:
    id: str
    sandbox: str | None
    host: str
    port: int
    method: str | None
    path: str | None
    source: Source
    first_seen: float  # unix seconds
    deadline: float  # loop monotonic time the answer is due by
    state: State = State.PENDING
    scope: Scope | None = None
    decided_by: str | None = None
    reason: str | None = None
    waiting: int = 0
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def destination(self) -> Destination:
        return (self.sandbox, self.host, self.port)

    def document(self) -> dict[str, Any]:
        """As the admin API and an approver see it (never a secret: the path is masked)."""
        return {
            "id": self.id,
            "sandbox": self.sandbox,
            "host": self.host,
            "port": self.port,
            "method": self.method,
            "path": self.path,
            "source": self.source.value,
            "first_seen": round(self.first_seen, 3),
            "waiting": self.waiting,
            "state": self.state.value,
            "scope": self.scope.text if self.scope else None,
            "decided_by": self.decided_by,
            "reason": self.reason,
        }


class Book:
    def __init__(self) -> None:
        self._open: dict[Destination, Approval] = {}
        self._all: OrderedDict[str, Approval] = OrderedDict()

    def open(
        self,
        destination: Destination,
        method: str | None,
        path: str | None,
        source: Source,
        timeout_s: float,
        max_pending: int,
    ) -> tuple[Approval | None, bool]:
        """The destination's pending approval (False) or a new one (True); (None, False)
        when its sandbox already has `max_pending` open."""
        found = self._open.get(destination)
        if found is not None:
            return found, False
        if self.pending(destination[0]) >= max_pending:
            return None, False
        sandbox, host, port = destination
        now = asyncio.get_running_loop().time()
        approval = Approval(
            "ap-" + secrets.token_hex(8),
            sandbox,
            host,
            port,
            method,
            path,
            source,
            time.time(),
            now + timeout_s,
        )
        self._open[destination] = approval
        self._all[approval.id] = approval
        while len(self._all) > KEPT + len(self._open):
            oldest = next(iter(self._all.values()))
            if oldest.state is State.PENDING:
                break  # only decided ones are forgotten
            self._all.popitem(last=False)
        return approval, True

    def pending(self, sandbox: str | None) -> int:
        return sum(1 for a in self._open.values() if a.sandbox == sandbox)

    def get(self, approval_id: str) -> Approval | None:
        return self._all.get(approval_id)

    def all(self) -> list[Approval]:
        """Open ones first, then the decided, newest first."""
        approvals = list(reversed(self._all.values()))
        return sorted(approvals, key=lambda a: a.state is not State.PENDING)

    def decide(
        self,
        approval: Approval,
        state: State,
        scope: Scope | None = None,
        by: str | None = None,
        reason: str | None = None,
    ) -> Approval:
        """Answer `approval` once and wake everything waiting on it."""
        if approval.state is not State.PENDING:
            raise AlreadyDecided(approval.id)
        approval.state, approval.scope = state, scope
        approval.decided_by, approval.reason = by, reason
        if self._open.get(approval.destination) is approval:
            del self._open[approval.destination]
        approval.answered.set()
        return approval

    def record(self, approval: Approval) -> None:
        """Remember an approval decided as it was made (a grant made ahead)."""
        self._all[approval.id] = approval

    def open_count(self) -> int:
        return len(self._open)
