"""The node's ceiling over a sandbox's connections (docs/configuration.md#sandboxes,
docs/decisions.md D174-D176): a sandbox file cannot change what the node decides about a
host the node inspects.

Pure functions of a policy and the decision its `decide` made; `proxy.stages` calls them.
For a node's own policy (`Policy.ceiling()` is None) they read its deciding entry alone;
for a sandbox's (`proxy.tenancy.SandboxPolicy`) the node's decision of the same host
(`Decision.node`) too:

* `relays`: TLS is relayed untouched only when the deciding entry is pass-through and, for
  a sandbox, the node's deciding entry is pass-through as well. Anything else is
  intercepted, and each request inside is judged by both entries.
* `raw_tcp`: a raw TCP stream reaches a destination only through an address entry that
  judges nothing per request (`judged_by`: no rules, git, `mcp:` or required placeholder), the
  sandbox's and the node's.
* `node_requires`: the node's entry's `require` holds for a sandbox's request: the
  proxy must write a credential into it (the sandbox's own secret swapped, or its
  transform), never the sandbox's own key.

Invariant: each answer is a relay or an allow only when every policy involved would give
it on its own; a would_deny of a sandbox (whose deciding entry may be the node's) is
never relayed.
"""

from __future__ import annotations

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy.config import Entry, PatternKind
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.policy import Policy


def judged_by(entry: Entry) -> Reason | None:
    """What an entry judges in every request, which a relayed stream would bypass: its
    rules or git items (`rule_mismatch`), a required placeholder (`credential_required`),
    its MCP messages (`mcp_bad_request`, D335)."""
    if entry.rules.active or entry.git is not None:
        return Reason.RULE_MISMATCH
    if entry.mcp is not None:
        return Reason.MCP_BAD_REQUEST
    if any(secret.require for secret in entry.secrets):
        return Reason.CREDENTIAL_REQUIRED
    return None


def _sides(policy: Policy, decision: Decision) -> tuple[Decision, ...] | None:
    """The decisions that must each allow a relay: the policy's, and its node's; None
    when a sandbox's node decision is missing or the decision is a sandbox's would_deny."""
    if policy.ceiling() is None:
        return (decision,)
    if decision.node is None or decision.report:
        return None
    return decision, decision.node


def relays(policy: Policy, decision: Decision) -> bool:
    """Whether an allowed TLS connection decided `decision` is relayed without inspection."""
    sides = _sides(policy, decision)
    if not decision.allowed or sides is None:
        return False
    return all(s.allowed and s.entry is not None and s.entry.passthrough for s in sides)


def raw_tcp(policy: Policy, decision: Decision) -> Decision:
    """The decision for a raw TCP stream to a destination `policy` decided `decision`:
    allowed only through address entries that judge nothing per request."""
    refused = Decision.deny(Reason.NOT_ALLOWLISTED)
    sides = _sides(policy, decision)
    if not decision.allowed or sides is None:
        return refused
    for side in sides:  # the sandbox's own refusal is named first, as `bounded` does
        entry = side.entry
        if not (side.allowed and entry is not None and entry.kind is PatternKind.ADDRESS):
            return refused
        judged = judged_by(entry)
        if judged is not None:  # rules judge HTTP requests; a raw stream has none to judge
            return Decision.deny(judged, entry)
    return decision


def node_requires(policy: Policy, decision: Decision, written: bool) -> Decision:
    """`decision` for a request into which the sandbox's entry wrote a credential
    (`written`: a placeholder swapped or a transform), or `credential_required` when the
    node's deciding entry requires a placeholder and nothing was written."""
    if policy.ceiling() is None or not decision.injects or written:
        return decision
    node = decision.node
    if node is None:
        raise InvariantError("a sandbox's allowed request carries its node's decision")
    entry = node.entry
    if entry is not None and any(secret.require for secret in entry.secrets):
        return Decision.deny(Reason.CREDENTIAL_REQUIRED, entry)
    return decision
