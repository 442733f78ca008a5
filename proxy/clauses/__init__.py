"""The clauses of an allowlist entry, as one table in the order a request meets their
adapters (`addons.clauses.ADAPTERS`), in the manner of h11's `READERS` and mitmproxy's
`default_addons()`.

Each row (`proxy.clauses.base.Clause`) names the entry's schema keys it owns, the
parser `proxy.config.loader` calls for them (their values kept in `Entry.clauses`), the
phase of `proxy.stages.decide_request` at which its head rule runs and the reasons only
it gives. Head rules run by phase (POLICY, SIGNED, ALLOWED), in table order within one.
Everything else an entry says (its pattern, ports, plaintext, pass-through,
report-only, and the values written into requests: transforms, secrets) is the core's:
`CORE_KEYS`, decided by `proxy.policy` and `proxy.values.swap`; the reasons the core
gives are `CORE_REASONS`. A new clause is a module here, an adapter in
`addons/clauses/`, and one row in each table (docs/decisions.md D440-D449).
"""

from __future__ import annotations

from sandbox_egress.proxy.clauses import budget, credentials, llm, mcp, rulestage, sigv4
from sandbox_egress.proxy.clauses.base import Clause, Head, Phase, Ruling
from sandbox_egress.proxy.decision import Reason

CLAUSES: tuple[Clause, ...] = (
    Clause(
        "budget",
        keys=("budget",),
        phase=Phase.ALLOWED,
        reasons=(Reason.BUDGET_EXCEEDED, Reason.BUDGET_UNAVAILABLE),
        parse=budget.parse,
    ),
    Clause(
        "credentials",
        keys=("credential",),
        phase=Phase.ALLOWED,
        reasons=(Reason.CREDENTIAL_UNAVAILABLE,),
        head=credentials.head,
    ),
    Clause(
        "sigv4",
        keys=("credential",),
        phase=Phase.SIGNED,
        reasons=(Reason.SIGV4_SCOPE_DENIED, Reason.SIGV4_UNSUPPORTED),
        head=sigv4.head,
    ),
    Clause(
        "rules",
        keys=("rules", "deny", "allow_encoded_slash", "git"),
        phase=Phase.POLICY,
        reasons=(Reason.RULE_MISMATCH, Reason.RULE_DENIED, Reason.GIT_PUSH_DENIED),
        parse=rulestage.parse,
        head=rulestage.head,
    ),
    Clause(
        "mcp",
        keys=("mcp",),
        phase=Phase.ALLOWED,
        reasons=(
            Reason.MCP_BAD_REQUEST,
            Reason.MCP_METHOD_DENIED,
            Reason.MCP_TOOL_DENIED,
            Reason.MCP_ARGUMENT_DENIED,
        ),
        parse=mcp.parse,
        head=mcp.head,
    ),
    Clause(  # issue 46: model APIs judged and metered (proxy/llm/)
        "llm",
        keys=("llm",),
        phase=Phase.ALLOWED,
        reasons=(
            Reason.LLM_MODEL_DENIED,
            Reason.LLM_BAD_REQUEST,
            Reason.LLM_BUDGET_EXCEEDED,
            Reason.LLM_MODEL_UNPRICED,
        ),
        parse=llm.parse,
        head=llm.head,
    ),
)

# What the core decides: where a request may go and the values written into it.
CORE_KEYS = frozenset(
    {"domain", "ports", "allow_plaintext", "passthrough", "report_only", "transform", "secrets"}
)
CORE_REASONS = frozenset(Reason) - {r for c in CLAUSES for r in c.reasons}


_HEADS = {p: tuple(c for c in CLAUSES if c.head is not None and c.phase is p) for p in Phase}


def heads(phase: Phase) -> tuple[Clause, ...]:
    """The clauses whose head rule runs at `phase`, in table order (made once: the table
    is a constant, and every request asks three times)."""
    return _HEADS[phase]


__all__ = ["CLAUSES", "CORE_KEYS", "CORE_REASONS", "Clause", "Head", "Phase", "Ruling", "heads"]
