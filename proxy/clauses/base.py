"""What one clause of an allowlist entry is, as a row of `proxy.clauses.CLAUSES`.

A clause is a part of an entry that judges the requests the entry allows beyond their
destination (rules, budgets, credentials fetched or signed, MCP messages). Its row
names the schema keys it owns, the parser the loader calls for them, the phase of
`proxy.stages.decide_request` at which its head rule runs and the reason codes only it
gives. The mitmproxy side of a clause (admit, write, hold, judge a held body, wrap the
answer) is its adapter, a row of `addons.clauses.ADAPTERS` with the same name.

Invariants: pure (no mitmproxy); a head rule reads only the `Head` it is given and
answers a `Ruling`; its `part` is what the clause's adapter acts on for that request
(`RequestAnswer.parts[name]`), never a secret value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import Host
from sandbox_egress.proxy.targets import Location

Fields = tuple[tuple[bytes, bytes], ...]
Report = Callable[[str, str], None]


class Deciding(Protocol):
    """What a head rule may ask of the policy deciding a request (`proxy.policy.Policy`,
    named by its methods so that the clauses never import the policy, which imports
    the loader, which reads this table)."""

    def decide(self, host: Host, port: int, *, tls: bool | None) -> Decision: ...

    def reported(self, decision: Decision) -> Decision: ...

    def ceiling(self) -> Deciding | None: ...


class Phase(StrEnum):
    """Where in `decide_request` a clause's head rule runs."""

    POLICY = "policy"  # the entry is chosen: before placeholders are swapped (rules)
    SIGNED = "signed"  # after the swap and the node's ceilings, before any lookup (sigv4)
    ALLOWED = "allowed"  # allowed, its address checked and pinned (credentials, mcp)


@dataclass(frozen=True, slots=True)
class Head:
    """What a head rule reads of one request: the decision so far, where it goes."""

    policy: Deciding
    decision: Decision
    located: Location
    method: str
    fields: Fields
    https: bool
    host: str  # the decided host, as a refusal names it

    def deciding(self, decision: Decision) -> Head:
        """This head with the decision from here: itself when the decision is the same
        object (most head rules keep it), else a copy made by the constructor, about half
        the cost of `dataclasses.replace`'s generic path (D440; run per clause phase and
        per head rule, every request)."""
        if decision is self.decision:
            return self
        return Head(
            self.policy, decision, self.located, self.method, self.fields, self.https, self.host
        )


@dataclass(frozen=True, slots=True)
class Ruling:
    """A head rule's answer: the decision from here, and this request's part for the
    clause's adapter (None: nothing for it to do)."""

    decision: Decision
    part: object | None = None


# The raw entry, its location (`network.allowlist[3]`), where problems go, and the keys
# the schema already refused: (whether it parsed, the value of each key it owns).
Parser = Callable[[Mapping[str, Any], str, Report, frozenset[str]], tuple[bool, dict[str, Any]]]
HeadRule = Callable[[Head], Ruling]


@dataclass(frozen=True, slots=True)
class Clause:
    name: str  # the adapter's name too
    keys: tuple[str, ...]  # the entry's schema keys it reads
    phase: Phase
    reasons: tuple[Reason, ...]  # the reason codes only this clause gives
    parse: Parser | None = None  # None: the keys are the core's (a credential binding)
    head: HeadRule | None = None  # None: it judges nothing before the request is applied
