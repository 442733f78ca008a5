"""What the stage addons share: the policy snapshot, the facts per client connection,
the pins, the decision counters and the audit line.

Invariant: `policy` is replaced in one assignment (a reload), and each hook reads it
once, so a reload never splits one decision (D24).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Protocol, cast

from mitmproxy import connection, http

from sandbox_egress.addons.auditing import Where, address_text, record
from sandbox_egress.addons.failclosed import failclosed
from sandbox_egress.addons.pinning import Pinning
from sandbox_egress.proxy.audit.log import AuditSink, Searcher, masked, masked_record
from sandbox_egress.proxy.clauses.git import PushItem
from sandbox_egress.proxy.clauses.sigv4 import Held
from sandbox_egress.proxy.credentials.cache import Credentials
from sandbox_egress.proxy.decision import Decision, Stage
from sandbox_egress.proxy.fairness import ClientKey, client_key
from sandbox_egress.proxy.mcp import McpState
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.resolver import FairResolver, Resolve
from sandbox_egress.proxy.stages import (
    ConnectAnswer,
    ConnectionFacts,
    Pin,
    RequestAnswer,
    RequestAsk,
)
from sandbox_egress.proxy.state import StateBackend
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.tenancy.tenants import Tenancy
from sandbox_egress.proxy.values.redact import NO_REDACTION, Redactor

FLOW_KEY = "egress"  # where a request's `FlowState` is kept in `flow.metadata`


@dataclass
class FlowState:
    """What the addons know about one request, from its headers to its audit line."""

    decision: Decision
    host: str
    started: float = field(default_factory=time.monotonic)
    injected: tuple[str, ...] = ()
    redactions: Redactor = NO_REDACTION
    refused_here: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0
    path: str | None = None  # the request-target as the client sent it, masked for the audit
    # Each clause adapter's state for this request, by clause name (`addons.clauses`).
    parts: dict[str, object] = field(default_factory=dict)
    # Fields a clause adds to the audit line (scalars, never a secret): `llm_model`...
    audit: dict[str, object] = field(default_factory=dict)
    credentials: tuple[str, ...] = ()  # issue 32: the credentials it needed (names only)

    @property
    def push(self) -> tuple[PushItem, ...]:  # a git push held until its commands are judged
        return cast("tuple[PushItem, ...]", self.parts.get("rules", ()))

    @push.setter
    def push(self, items: tuple[PushItem, ...]) -> None:
        self._part("rules", items or None)

    @property
    def sigv4(self) -> Held | None:  # a body held until hashed, then re-signed
        return cast("Held | None", self.parts.get("sigv4"))

    @sigv4.setter
    def sigv4(self, held: Held | None) -> None:
        self._part("sigv4", held)

    @property
    def mcp(self) -> McpState | None:  # an MCP POST: held, judged, its answer filtered
        return cast("McpState | None", self.parts.get("mcp"))

    @mcp.setter
    def mcp(self, held: McpState | None) -> None:
        self._part("mcp", held)

    def _part(self, clause: str, value: object | None) -> None:
        if value is None:
            self.parts.pop(clause, None)
        else:
            self.parts[clause] = value


class Gate(Protocol):
    """Where a `not_allowlisted` stage answer is held (`addons.approvals.ApprovalGate`)."""

    async def connect(
        self,
        client: connection.Client,
        policy: Policy,
        resolve: Resolve,
        facts: ConnectionFacts,
        answer: ConnectAnswer,
    ) -> ConnectAnswer: ...

    async def request(
        self,
        flow: http.HTTPFlow,
        policy: Policy,
        resolve: Resolve,
        facts: ConnectionFacts,
        ask: RequestAsk,
        answer: RequestAnswer,
    ) -> RequestAnswer: ...

    async def request_hook(self, flow: http.HTTPFlow) -> None: ...

    def client_disconnected(self, client: connection.Client) -> None: ...


class Shared:
    def __init__(
        self,
        policy: Policy,
        metrics: ProxyMetrics,
        audit: AuditSink,
        resolve: Resolve | FairResolver,
        pinning: Pinning,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.audit = audit
        self.resolve = resolve
        self.pinning = pinning
        self._facts: dict[str, ConnectionFacts] = {}  # client connection id -> facts
        # Where budgets are kept (proxy.state; the launcher opens the configured one):
        # outlives a reload, so what was spent stays spent.
        self.state: StateBackend = MemoryState()
        self.tenancy: Tenancy | None = None  # a node proxy's sandboxes; replaced whole (D24)
        # issue 32: the credential cache; a reload keeps unchanged credentials' values.
        self.credentials = Credentials({})
        self.approvals: Gate | None = None  # issue 47: held unknown destinations

    # -- connections ----------------------------------------------------------------------

    def resolve_for(self, client: connection.Client) -> Resolve:
        """The resolver for this client's lookups: its fair share when shares are kept, its
        sandbox's share on a node proxy (one sandbox cannot take every lookup, D96)."""
        if isinstance(self.resolve, FairResolver):
            sandbox = self.facts(client).sandbox
            key = ClientKey(f"sandbox {sandbox}") if sandbox else key_of(client)
            return self.resolve.for_client(key)
        return self.resolve

    def facts(self, client: connection.Client) -> ConnectionFacts:
        return self._facts.get(client.id) or ConnectionFacts()

    def policy_for(self, client: connection.Client) -> Policy:
        """The policy that decides for this connection: the node's, or its sandbox's."""
        tenancy = self.tenancy
        if tenancy is None:
            return self.policy
        return tenancy.policy(self.facts(client).sandbox)

    def learned(self, client: connection.Client, facts: ConnectionFacts) -> None:
        self._facts[client.id] = facts

    def opened(self, client: connection.Client) -> None:
        self._facts[client.id] = ConnectionFacts()

    def closed(self, client: connection.Client) -> bool:
        """Forget the connection; False when it was never opened (or closed twice)."""
        return self._facts.pop(client.id, None) is not None

    def pin(self, client: connection.Client, *pins: Pin) -> None:
        for pin in pins:
            self.pinning.pin(client, pin.destination, pin.address)

    def pinned(self, client: connection.Client, host: str, port: int | None) -> str | None:
        """The checked address a destination is pinned to, as `ip:port`."""
        if port is None:
            return None
        return address_text(self.pinning.pinned(client, (host, port)))

    # -- failing closed, counting, auditing -------------------------------------------------

    def failclosed(self, stage: Stage) -> AbstractContextManager[None]:
        """The one fail-closed wrapper (`addons.failclosed`), counting under `stage`."""
        return failclosed(self.metrics, stage)

    def count(self, stage: Stage, decision: Decision) -> None:
        self.metrics.count_decision(stage, decision.verdict, decision.reason)

    def write_audit(
        self,
        where: Where,
        decision: Decision,
        started: float,
        status: int | None,
        state: FlowState | None = None,
    ) -> None:
        sent, received, injected = (
            (state.bytes_sent, state.bytes_received, state.injected) if state else (0, 0, ())
        )
        sandbox = self.facts(where.client).sandbox
        mcp = state.mcp.audit_names() if state and state.mcp else None
        named = state.credentials if state else ()
        written = record(
            where, decision, started, status, sent, received, injected, sandbox, mcp, named
        )
        if state is not None and state.audit:
            written = replace(written, extra=tuple(state.audit.items()))
        self.audit.write(masked_record(written, self.held_values()))

    def held_values(self) -> tuple[Searcher | None, ...]:
        """Every spelling of every resolved value this proxy holds: the configuration's
        (a node's and all its sandboxes'), and the credential cache's. What the sandbox
        chose (host, SNI, path) is written to the audit with them masked (D363)."""
        configured = (
            self.tenancy.held()
            if self.tenancy is not None
            else (self.policy.placeholders().values,)
        )
        return (*configured, self.credentials.held())

    def masked(self, text: str) -> str:
        """`text` (a host or target the sandbox chose) with every spelling of a value this
        proxy holds as `[secret]`: how it is logged, audited and named in a refusal."""
        return masked(text, self.held_values())


def counter(state: FlowState, attribute: str) -> Callable[[bytes], bytes]:
    """A mitmproxy stream callable that passes chunks through and counts their bytes."""

    def count(chunk: bytes) -> bytes:
        setattr(state, attribute, getattr(state, attribute) + len(chunk))
        return chunk

    return count


def key_of(client: connection.Client) -> ClientKey:
    """The client's fair-share key (`proxy.fairness.client_key`): its address today."""
    return client_key(str(client.peername[0]) if client.peername else "")
