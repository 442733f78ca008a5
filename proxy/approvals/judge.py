"""Which refusals may be held, and how a granted destination is judged
(docs/configuration.md#approvals).

* `holdable(decision)`: only `not_allowlisted` — the name stage found no entry — and, on
  a node proxy, only when the node's file (the ceiling, 1.12) does not refuse it too.
  Every other refusal (loopback, internal, the proxy itself, host_mismatch, rules, git,
  MCP, credentials, budgets, ...) is never held, whoever would approve (D481).
* `granted(policy, host, port, approval)`: the policy with its named entries replaced by
  one entry naming just that host and port (no transform, no secret, no rules), built for
  the one decision; its IP/CIDR entries stay for the address stage. Everything else the
  policy checks stays: the address stage (a name that resolves to an internal or
  loopback address is still refused), the placeholders
  of the file (one sent to the granted host is `placeholder_elsewhere`), and a sandbox's
  node (its rules and its address checks).
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from sandbox_egress.proxy.config.loader import Entry, PatternKind
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.hosts import Host
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.tenants import SandboxPolicy

# The entry's index: beyond any file's, so no placeholder of the file belongs to it.
GRANT_INDEX = 1 << 30


def holdable(decision: Decision) -> bool:
    """A refusal an approval may lift: `not_allowlisted` within the node's ceiling."""
    if decision.allowed or decision.reason is not Reason.NOT_ALLOWLISTED:
        return False
    return decision.node is None or decision.node.allowed


def grant_entry(host: Host, port: int, approval: str) -> Entry:
    if host.ip is not None:
        network = ipaddress.ip_network(host.ip)
        return Entry(
            GRANT_INDEX, str(host), PatternKind.ADDRESS, network=network,
            ports=frozenset({port}), approval=approval,
        )  # fmt: skip
    return Entry(
        GRANT_INDEX, str(host), PatternKind.EXACT, name=host.name,
        ports=frozenset({port}), approval=approval,
    )  # fmt: skip


def granted(policy: Policy, host: Host, port: int, approval: str) -> Policy:
    """`policy` deciding `host:port` like an entry naming just it (and nothing else)."""
    entry = grant_entry(host, port, approval)
    # The file's IP/CIDR entries stay: the address stage opens an internal address only
    # through one of them (a granted name resolving to an internal address stays refused).
    # A granted address's /32 (/128) is the longest prefix: it decides that address.
    addresses = tuple(e for e in policy.config.allowlist if e.kind is PatternKind.ADDRESS)
    network = replace(policy.config, allowlist=(entry, *addresses), report_only=False)
    if isinstance(policy, SandboxPolicy):
        return SandboxPolicy(replace(policy.sandbox, network=network), policy.node)
    return Policy(network, policy._self_addresses, policy._is_local)
