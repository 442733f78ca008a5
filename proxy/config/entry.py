"""An allowlist entry as the loader makes it (`proxy.config.loader`): frozen, canonical
(names lowercase IDNA without the trailing dot, networks `ip_network` values, ports a
frozenset), its clauses' values by schema key (`proxy.clauses.CLAUSES`).

Its own module so that what reads an entry (`proxy.decision`, the clauses) does not
import the loader, which imports the clause table (no import cycle, D441).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sandbox_egress.proxy.clauses.budget import Budget
from sandbox_egress.proxy.clauses.git import GitPolicy
from sandbox_egress.proxy.clauses.rules import NO_RULES, Rules
from sandbox_egress.proxy.clauses.sigv4binding import SigV4Binding
from sandbox_egress.proxy.config.patterns import IPNetwork, PatternKind
from sandbox_egress.proxy.credentials.section import Binding
from sandbox_egress.proxy.mcp.policy import McpPolicy
from sandbox_egress.proxy.values.placeholders import Placeholder
from sandbox_egress.proxy.values.redact import NO_REDACTION, Redactor
from sandbox_egress.proxy.values.transforms import Transform


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    pattern: str
    kind: PatternKind
    name: str | None = None  # EXACT: the name; WILDCARD: the suffix after "*."
    network: IPNetwork | None = None
    ports: frozenset[int] | None = None
    transform: tuple[Transform, ...] = ()
    allow_plaintext: bool = False
    passthrough: bool = False
    report_only: bool = False  # refusals this entry decides are logged and let through
    secrets: tuple[Placeholder, ...] = ()  # placeholders swapped for values (proxy.swap)
    credential: Binding | None = None  # a credential written as a header, or signed (1.13)
    sigv4: SigV4Binding | None = None  # as: sigv4: the signatures re-signed (proxy.sigv4)
    # The clauses' values by schema key (`proxy.clauses.CLAUSES`), read through the
    # properties below or a clause's own accessor.
    clauses: Mapping[str, Any] = field(default=MappingProxyType({}), hash=False)
    # What to redact from a response to a request this entry injected into: every
    # resolved value and referenced part, and their matchers (proxy.redact). Never log it.
    redactions: Redactor = field(default=NO_REDACTION, repr=False, compare=False)
    # issue 47: an entry no file wrote, naming one granted host:port (proxy.approvals.judge):
    # the approval's id, carried to the audit line.
    approval: str | None = None

    def allows_port(self, port: int) -> bool:
        return self.ports is None or port in self.ports

    @property
    def rules(self) -> Rules:  # methods, paths and queries the entry admits
        rules: Rules = self.clauses.get("rules", NO_RULES)
        return rules

    @property
    def git(self) -> GitPolicy | None:  # smart-HTTP fetches and pushes
        git: GitPolicy | None = self.clauses.get("git")
        return git

    @property
    def budget(self) -> Budget | None:  # requests and upload per window
        budget: Budget | None = self.clauses.get("budget")
        return budget

    @property
    def mcp(self) -> McpPolicy | None:  # MCP messages judged per message
        mcp: McpPolicy | None = self.clauses.get("mcp")
        return mcp
