"""The outcome of the egress policy: a verdict, a reason from a closed set, the deciding entry.

Invariants:
* A `Decision` is immutable. The zero value a caller can build without thinking
  (`Decision.deny(...)`) is a refusal; an allow always names the entry that allowed it.
* `Reason` is the complete set of codes that can appear in a response header, an
  audit line or a metric label. Adding one is a documented change (docs/configuration.md).
  `Stage` is the closed set of stages a decision or a policy error is counted under.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox_egress.proxy.config.entry import Entry


class Reason(StrEnum):
    """Why a request was allowed or refused (docs/configuration.md#reason-codes;
    README.md#command-line)."""

    ALLOWLISTED = "allowlisted"
    NOT_ALLOWLISTED = "not_allowlisted"
    LOOPBACK = "loopback"
    PROXY_HOST = "proxy_host"  # issue 48: the proxy's endpoints, its host's own addresses
    INTERNAL_ADDRESS = "internal_address"
    PORT_NOT_ALLOWED = "port_not_allowed"
    PLAINTEXT_CREDENTIALS = "plaintext_credentials"
    HOST_MISMATCH = "host_mismatch"
    NO_SNI = "no_sni"
    BAD_REQUEST = "bad_request"
    DNS_FAILURE = "dns_failure"
    POLICY_ERROR = "policy_error"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    RULE_MISMATCH = "rule_mismatch"
    RULE_DENIED = "rule_denied"
    GIT_PUSH_DENIED = "git_push_denied"
    BUDGET_EXCEEDED = "budget_exceeded"
    CREDENTIAL_REQUIRED = "credential_required"
    PLACEHOLDER_ELSEWHERE = "placeholder_elsewhere"
    UNKNOWN_SANDBOX = "unknown_sandbox"  # a node proxy's client that no sandbox claims (1.12)
    CONNECTION_LIMIT = "connection_limit"  # a sandbox's open connections are at its bound
    UPSTREAM_TLS = "upstream_tls"
    # issue 33: MCP messages judged per message (proxy/mcp/)
    MCP_BAD_REQUEST = "mcp_bad_request"
    MCP_METHOD_DENIED = "mcp_method_denied"
    MCP_TOOL_DENIED = "mcp_tool_denied"
    MCP_ARGUMENT_DENIED = "mcp_argument_denied"
    # issue 32: credentials the proxy fetches and mints
    CREDENTIAL_UNAVAILABLE = "credential_unavailable"
    # Issue 32: SigV4 re-signing, and resolved values the sandbox must not hold.
    SIGV4_SCOPE_DENIED = "sigv4_scope_denied"
    SIGV4_UNSUPPORTED = "sigv4_unsupported"
    SECRET_ELSEWHERE = "secret_elsewhere"
    # issue 34: the shared budget state (1.16) is unreachable and `state.on_error` is deny
    BUDGET_UNAVAILABLE = "budget_unavailable"
    # issues 43, 48: an allowed request whose upstream failed (D352)
    UPSTREAM_REFUSED = "upstream_refused"
    UPSTREAM_RESET = "upstream_reset"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    # issue 47: a held not_allowlisted destination (proxy/approvals/)
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_TIMEOUT = "approval_timeout"
    APPROVAL_LIMIT = "approval_limit"

    # issue 46: model APIs judged and metered (proxy/llm/)
    LLM_MODEL_DENIED = "llm_model_denied"
    LLM_BAD_REQUEST = "llm_bad_request"
    LLM_BUDGET_EXCEEDED = "llm_budget_exceeded"
    LLM_MODEL_UNPRICED = "llm_model_unpriced"


class Stage(StrEnum):
    """Where in a connection the proxy decides (`proxy.stages`), or failed to: a label value.

    `DECIDING` stages count decisions (`egress_decisions_total{stage}`), so a CONNECT and
    the requests inside its tunnel are not summed; every stage counts its exceptions
    (`egress_policy_errors_total{stage}`): `response` cleans answers, `upstream` pins.
    """

    CONNECT = "connect"
    TLS = "tls"
    REQUEST = "request"
    TCP = "tcp"
    RESPONSE = "response"
    UPSTREAM = "upstream"


DECIDING: tuple[Stage, ...] = (Stage.CONNECT, Stage.TLS, Stage.REQUEST, Stage.TCP)


# A human sentence for each refusal, shown in the JSON body. Never includes secrets.
MESSAGES: dict[Reason, str] = {
    Reason.ALLOWLISTED: "The destination is allowlisted.",
    Reason.NOT_ALLOWLISTED: "The destination host is not in network.allowlist.",
    Reason.LOOPBACK: "Loopback and unspecified addresses can never be reached through the proxy.",
    Reason.PROXY_HOST: (
        "The destination is the proxy itself or another address of the host it runs on, "
        "which can never be reached through the proxy (a single-address entry opens "
        "another port of the host)."
    ),
    Reason.INTERNAL_ADDRESS: (
        "The destination is an internal, link-local, metadata or reserved address "
        "and no IP/CIDR entry of network.allowlist opens it."
    ),
    Reason.PORT_NOT_ALLOWED: "The destination port is not in the allowlist entry's ports.",
    Reason.PLAINTEXT_CREDENTIALS: (
        "This host receives injected credentials, which are only sent over TLS; use https://."
    ),
    Reason.HOST_MISMATCH: (
        "The HTTP Host/:authority does not name the host the connection was opened for."
    ),
    Reason.NO_SNI: "The TLS ClientHello carries no server name and the address is not allowlisted.",
    Reason.BAD_REQUEST: (
        "The request is malformed: its host, port or header fields, or a path an "
        "upstream could read two ways."
    ),
    Reason.DNS_FAILURE: "The destination host name could not be resolved.",
    Reason.POLICY_ERROR: "The proxy failed to evaluate its policy; the request was refused.",
    Reason.METHOD_NOT_ALLOWED: (
        "TRACE and TRACK are refused to a host that receives injected credentials: "
        "the answer would echo them."
    ),
    Reason.RULE_MISMATCH: "No rule of the allowlist entry admits this method, path and query.",
    Reason.RULE_DENIED: "A deny rule of the allowlist entry refuses this request.",
    Reason.BUDGET_EXCEEDED: (
        "The allowlist entry's budget (requests or upload per window) is spent; "
        "retry after the Retry-After seconds."
    ),
    Reason.GIT_PUSH_DENIED: (
        "The allowlist entry's git.push does not allow this push (repository, ref or deletion)."
    ),
    Reason.CREDENTIAL_REQUIRED: (
        "This host requires the placeholder the sandbox was given; "
        "a request without it (or with a credential of its own) is refused."
    ),
    Reason.PLACEHOLDER_ELSEWHERE: (
        "The request carries a placeholder that belongs to another allowlist entry's host."
    ),
    Reason.UNKNOWN_SANDBOX: (
        "This proxy serves sandboxes and no sandbox claims this client "
        "(proxy credentials or source address)."
    ),
    Reason.CONNECTION_LIMIT: "This sandbox has as many connections open as it may; retry later.",
    Reason.UPSTREAM_TLS: (
        "The TLS handshake with the destination failed: its certificate did not verify "
        "or it does not speak TLS."
    ),
    # issue 33
    Reason.MCP_BAD_REQUEST: (
        "The MCP request is not one strict JSON-RPC message or batch in application/json "
        "within the entry's mcp.max_body, or its Mcp-Method/Mcp-Name headers disagree with it."
    ),
    Reason.MCP_METHOD_DENIED: "The MCP method is not in the allowlist entry's mcp.methods.",
    Reason.MCP_TOOL_DENIED: "The MCP tool is not in the allowlist entry's mcp.tools.",
    Reason.MCP_ARGUMENT_DENIED: "An argument of the MCP tool call fails its clause in mcp.tools.",
    # issue 32
    Reason.CREDENTIAL_UNAVAILABLE: (
        "The proxy could not fetch the credential this host receives; nothing was sent."
    ),
    # Issue 32.
    Reason.SIGV4_SCOPE_DENIED: (
        "The request's SigV4 credential scope names a service or region the allowlist "
        "entry's sigv4 binding does not."
    ),
    Reason.SIGV4_UNSUPPORTED: (
        "The proxy cannot re-sign this AWS request: SigV4A, chunk-signed streaming "
        "payloads, presigned URLs, or an undeclared payload hash over a body it cannot hold."
    ),
    Reason.SECRET_ELSEWHERE: (
        "The request carries a credential value the proxy holds; the sandbox should "
        "only ever hold placeholders."
    ),
    # issue 34
    Reason.BUDGET_UNAVAILABLE: (
        "The shared budget state cannot be reached and the proxy is configured to refuse "
        "budgeted requests until it can; retry later."
    ),
    # issues 43, 48
    Reason.UPSTREAM_REFUSED: (
        "The destination refused the connection or could not be reached: nothing listens "
        "on that port, or no route leads there."
    ),
    Reason.UPSTREAM_RESET: (
        "The destination closed or reset the connection, or answered something that is "
        "not HTTP, before its answer was complete."
    ),
    Reason.UPSTREAM_TIMEOUT: (
        "The destination did not accept the connection, or did not begin its answer, "
        "within the proxy's upstream timeouts."
    ),
    # issue 47
    Reason.APPROVAL_DENIED: (
        "The destination host is not in network.allowlist and the approval asked for it was denied."
    ),
    Reason.APPROVAL_TIMEOUT: (
        "The destination host is not in network.allowlist and nobody answered the approval "
        "asked for it in time."
    ),
    Reason.APPROVAL_LIMIT: (
        "The destination host is not in network.allowlist and this sandbox already has as "
        "many approvals waiting as it may; nothing was asked."
    ),
    # issue 46
    Reason.LLM_MODEL_DENIED: "The allowlist entry's llm.models does not admit this model.",
    Reason.LLM_BAD_REQUEST: (
        "A generation request to a model API must be one JSON object naming its model, "
        "with whole-number output limits."
    ),
    Reason.LLM_BUDGET_EXCEEDED: (
        "The sandbox has spent the allowlist entry's llm.budget (tokens or cost per "
        "window); retry after Retry-After seconds."
    ),
    Reason.LLM_MODEL_UNPRICED: (
        "The allowlist entry has a cost budget and llm.prices holds no price for this model."
    ),
}

# Refusals are 403; a name that does not resolve, or an upstream whose TLS fails, is a
# gateway failure, not a policy refusal; a sandbox at its connection bound is asked to wait.
STATUS: dict[Reason, int] = {
    Reason.DNS_FAILURE: 502,
    Reason.UPSTREAM_TLS: 502,
    Reason.CREDENTIAL_UNAVAILABLE: 502,  # issue 32
    Reason.CONNECTION_LIMIT: 429,
    Reason.BUDGET_EXCEEDED: 429,
    Reason.MCP_BAD_REQUEST: 400,  # issue 33
    Reason.BUDGET_UNAVAILABLE: 503,  # issue 34
    Reason.UPSTREAM_REFUSED: 502,  # issues 43, 48
    Reason.UPSTREAM_RESET: 502,
    Reason.UPSTREAM_TIMEOUT: 504,
    Reason.LLM_BAD_REQUEST: 400,  # issue 46
    Reason.LLM_BUDGET_EXCEEDED: 429,
}

# The proxy failed rather than refused (D352): the body says `"error": "egress_failed"`.
FAILURES: frozenset[Reason] = frozenset(
    {
        Reason.DNS_FAILURE,
        Reason.UPSTREAM_TLS,
        Reason.CREDENTIAL_UNAVAILABLE,
        Reason.UPSTREAM_REFUSED,
        Reason.UPSTREAM_RESET,
        Reason.UPSTREAM_TIMEOUT,
    }
)


# Refusals that report-only mode lets through as `would_deny` (docs/configuration.md
# "Report-only"): allowlist membership, ports and plaintext. Never loopback, the proxy
# itself, internal or metadata addresses, fronting, malformed requests or errors.
REPORTABLE: frozenset[Reason] = frozenset(
    {
        Reason.NOT_ALLOWLISTED,
        Reason.PORT_NOT_ALLOWED,
        Reason.PLAINTEXT_CREDENTIALS,
        Reason.RULE_MISMATCH,
        Reason.RULE_DENIED,
    }
)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: Reason
    entry: Entry | None = None
    # Report-only: the request goes through (`allowed`), but `reason` says why the
    # allowlist would have refused it; nothing is injected into it.
    report: bool = False
    # The clause of the entry's rules that decided (`rules[1]`, `deny[0]`), or "".
    clause: str = ""
    # A sandbox's decision: the node's decision of the same host (`proxy.tenancy`), kept so
    # that the request's rules stage does not decide the host again (D167).
    node: Decision | None = field(default=None, compare=False, repr=False)

    @classmethod
    def allow(cls, entry: Entry) -> Decision:
        return cls(True, Reason.ALLOWLISTED, entry)

    @classmethod
    def deny(cls, reason: Reason, entry: Entry | None = None, clause: str = "") -> Decision:
        if reason is Reason.ALLOWLISTED:
            raise ValueError("a refusal needs a refusal reason")
        return cls(False, reason, entry, clause=clause)

    @classmethod
    def would_deny(cls, refusal: Decision) -> Decision:
        """Report-only: let `refusal` through, keeping its reason and entry."""
        if refusal.allowed or refusal.reason not in REPORTABLE:
            raise ValueError("only a reportable refusal can be let through")
        return cls(True, refusal.reason, refusal.entry, report=True, clause=refusal.clause)

    # `dataclasses.replace` introspects the fields on every call; these run per request.
    def with_clause(self, clause: str) -> Decision:
        return Decision(self.allowed, self.reason, self.entry, self.report, clause, self.node)

    def with_node(self, node: Decision) -> Decision:
        return Decision(self.allowed, self.reason, self.entry, self.report, self.clause, node)

    @property
    def injects(self) -> bool:
        """Whether the deciding entry's transform may be written: a real allow only."""
        return self.allowed and not self.report and self.entry is not None

    @property
    def verdict(self) -> str:
        if self.report:
            return "would_deny"
        return "allow" if self.allowed else "deny"

    @property
    def rule(self) -> str:
        """The deciding entry's pattern, a bounded label value ("" when none decided)."""
        return self.entry.pattern if self.entry is not None else ""

    @property
    def status(self) -> int:
        return STATUS.get(self.reason, 403)

    @property
    def message(self) -> str:
        return MESSAGES[self.reason]


def bounded(node: Decision, own: Decision) -> Decision:
    """A sandbox's decision inside the node's ceiling.

    A real refusal wins over a report-only one, and the sandbox's own refusal is named
    first (its file is what its operator edits). A `would_deny` of either side lets the
    request through injecting nothing. Otherwise the sandbox's entry decides.
    """
    for decision in (own, node):
        if not decision.allowed:
            return decision
    for decision in (own, node):
        if decision.report:
            return decision
    return own
