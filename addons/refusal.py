"""The refusal a sandbox sees (docs/configuration.md#reason-codes): status, `X-Egress-Denied:
<code>`, a JSON body.

The body names the reason code, a fixed human sentence and the host the client
asked for (its own input, JSON-escaped). It never carries configuration values.
"""

from __future__ import annotations

import json

from mitmproxy import http

from sandbox_egress.proxy.decision import FAILURES, Decision
from sandbox_egress.proxy.mcp.judge import MCP_REASONS, refusal_body


def refusal_response(decision: Decision, host: str, method: str = "GET") -> http.Response:
    """The refusal; to a HEAD without its body (RFC 9110 9.3.2), the headers unchanged. An
    MCP reason before the body was read is a JSON-RPC error without an id."""
    if decision.reason in MCP_REASONS:
        return http.Response.make(
            decision.status,
            refusal_body(decision.reason, decision.message, None),
            {"Content-Type": "application/json", "X-Egress-Denied": decision.reason.value},
        )
    body = {
        "error": "egress_failed" if decision.reason in FAILURES else "egress_denied",
        "reason": decision.reason.value,
        "message": decision.message,
        "host": host[:255],
    }
    response = http.Response.make(
        decision.status,
        json.dumps(body).encode() + b"\n",
        {"Content-Type": "application/json", "X-Egress-Denied": decision.reason.value},
    )
    if method.upper() == "HEAD":
        # Content-Length still says what a GET would get; no byte of it is sent.
        response.data.content = b""
    return response
