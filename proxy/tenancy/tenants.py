"""Many sandboxes in one proxy: each sandbox's policy inside the node's ceiling
(docs/configuration.md#sandboxes).

* `bounded(node, own)` is the whole rule, a pure function of two decisions: a request is
  allowed only when the node's allowlist and the sandbox's both allow it, and what is
  written into it (transforms, later secrets and budgets) comes from the sandbox's
  deciding entry, never the node's.
* `SandboxPolicy` is a sandbox's own `Policy` (its allowlist, indexed once) whose `decide`
  and `pick_address` also ask the node's: the connection stages (`proxy.stages`) take it
  where they take the node's policy, unchanged.
* `Tenancy` is one immutable snapshot of every sandbox's policy, token and addresses,
  replaced in one assignment when the directory or the node file changes (D24). A
  client no sandbox claims gets `UNKNOWN`, which refuses everything as `unknown_sandbox`.
* `ConnectionQuota` bounds the open client connections of each sandbox, so one sandbox
  cannot take the connections the others share.

Invariants: one sandbox's policy is reachable only through its own id; no lookup falls
back to another sandbox's policy or to the node's alone. A sandbox's requests are searched
for the node file's and its own file's placeholders and values only: another sandbox's
file, less trusted, never refuses them (D425).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import re2

from sandbox_egress.proxy.config.loader import Entry, NetworkConfig
from sandbox_egress.proxy.decision import Decision, Reason, bounded
from sandbox_egress.proxy.hosts import Host, IPAddress
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.addresses import client_address
from sandbox_egress.proxy.tenancy.sandboxes import Sandbox, SandboxesSection
from sandbox_egress.proxy.values.placeholders import Holder, PlaceholderIndex, Searcher, merged
from sandbox_egress.proxy.values.secret import Secret


class SandboxPolicy(Policy):
    """A sandbox's own allowlist, bounded by the node's (`bounded`)."""

    def __init__(self, sandbox: Sandbox, node: Policy) -> None:
        super().__init__(sandbox.network, node._self_addresses, node._is_local)
        self.sandbox = sandbox
        self.node = node
        # A request is searched for the placeholders and values of what this sandbox sees
        # (the node file's and its own file's) only: another sandbox's file, less trusted,
        # never refuses this one's requests (D425, narrowing D179 and D342). Matched by RE2.
        self.everyone = merged((node.config.placeholders, sandbox.network.placeholders))

    def placeholders(self) -> PlaceholderIndex:
        return self.everyone

    def holder(self, entry: Entry | None) -> Holder | None:
        """The sandbox file's entry, or the node's (a node's would_deny decides)."""
        if entry is None:
            return None
        own = self.config.allowlist
        mine = entry.index < len(own) and own[entry.index] is entry
        return ((self.config if mine else self.node.config).source, entry.index)

    def _decision(self, host: Host, port: int, tls: bool | None) -> Decision:
        """Both files' decisions, bounded (`Policy.decide` remembers a name's: a changed
        node or file builds a new `SandboxPolicy`, `Tenancy.rebuilt`)."""
        own = super()._decision(host, port, tls)
        node = self.node.decide(host, port, tls=tls)
        return bounded(node, own).with_node(node)

    def ceiling(self) -> Policy:
        return self.node

    def pick_address(
        self, decision: Decision, addresses: Sequence[IPAddress], port: int
    ) -> tuple[Decision, IPAddress | None]:
        """The first address both the node's and the sandbox's address stages permit."""
        if not decision.allowed or not addresses:
            return super().pick_address(decision, addresses, port)
        node = self.node
        permitted = [ip for ip in addresses if node.pick_address(decision, (ip,), port)[1]]
        if not permitted:
            return node.pick_address(decision, addresses, port)
        return super().pick_address(decision, permitted, port)


class _Unknown(Policy):
    """The policy of a client no sandbox claims: every destination is `unknown_sandbox`."""

    def decide(self, host: Host, port: int, *, tls: bool | None) -> Decision:
        return Decision.deny(Reason.UNKNOWN_SANDBOX)


UNKNOWN: Policy = _Unknown(NetworkConfig("<unknown sandbox>"))


@dataclass(frozen=True)
class Tenancy:
    """Every sandbox's policy at one moment; read once per hook, replaced whole."""

    section: SandboxesSection
    node: Policy
    policies: Mapping[str, SandboxPolicy] = field(default_factory=dict)
    by_address: Mapping[IPAddress, str] = field(default_factory=dict)
    # Every resolved value of the node and of every sandbox: what the audit masks in what a
    # sandbox chose (D363). Empty: the node's alone (a snapshot with no sandbox yet).
    values: tuple[Searcher, ...] = ()

    def held(self) -> tuple[Searcher | None, ...]:
        return self.values or (self.node.config.placeholders.values,)

    def policy(self, sandbox: str | None) -> Policy:
        found = self.policies.get(sandbox) if sandbox is not None else None
        return found if found is not None else UNKNOWN

    def token(self, sandbox: str) -> Secret | None:
        found = self.policies.get(sandbox)
        return found.sandbox.token if found is not None else None

    def sandbox_class(self, sandbox: str | None) -> str | None:
        found = self.policies.get(sandbox) if sandbox is not None else None
        return found.sandbox.sandbox_class if found is not None else None

    def claimant(self, address: IPAddress) -> str | None:
        """The sandbox whose `addresses` hold the client address (IPv4-mapped: its IPv4,
        the only spelling a file's addresses hold, D429)."""
        return self.by_address.get(client_address(address))

    def rebuilt(
        self, sandboxes: Mapping[str, Sandbox], node: Policy, changed: frozenset[str]
    ) -> Tenancy:
        """The snapshot for `sandboxes`: a policy is built again only when its sandbox
        changed or the node's policy did; the others are shared with this snapshot."""
        policies: dict[str, SandboxPolicy] = {}
        for sandbox_id, sandbox in sandboxes.items():
            kept = self.policies.get(sandbox_id)
            if kept is not None and node is self.node and sandbox_id not in changed:
                policies[sandbox_id] = kept
            else:
                policies[sandbox_id] = SandboxPolicy(sandbox, node)
        by_address = {a: s.id for s in sandboxes.values() for a in s.addresses}
        return Tenancy(self.section, node, policies, by_address, held_values(node, policies))


def held_values(node: Policy, policies: Mapping[str, SandboxPolicy]) -> tuple[Searcher, ...]:
    """The node's and every sandbox's values: one matcher where RE2 holds them all, else
    one per file (a request of one sandbox is searched for its own only, D425; the audit
    masks everyone's, D363; past RE2's limit a matcher per file, D427)."""
    indexes = (
        node.config.placeholders,
        *(p.sandbox.network.placeholders for p in policies.values()),
    )
    try:
        one = merged(indexes).values
        return () if one is None else (one,)
    except re2.error:
        return tuple(index.values for index in indexes if index.values is not None)


class ConnectionQuota:
    """Open client connections per sandbox, each sandbox bounded on its own."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def acquire(self, sandbox: str, limit: int) -> bool:
        """Count one more connection of `sandbox`; False (nothing counted) at `limit`."""
        count = self._open.get(sandbox, 0)
        if count >= limit:
            return False
        self._open[sandbox] = count + 1
        return True

    def release(self, sandbox: str) -> None:
        count = self._open.get(sandbox, 0) - 1
        if count > 0:
            self._open[sandbox] = count
        else:
            self._open.pop(sandbox, None)

    def open(self, sandbox: str) -> int:
        return self._open.get(sandbox, 0)
