"""The refusal a sandbox sees (SPEC 1.5): status, `X-Egress-Denied: <code>`, a JSON body.

The body names the reason code, a fixed human sentence and the host the client
asked for (its own input, JSON-escaped). It never carries configuration values.
"""

from __future__ import annotations

import json

from mitmproxy import http

from proxy.decision import Decision


def refusal_response(decision: Decision, host: str) -> http.Response:
    body = {
        "error": "egress_denied" if decision.status == 403 else "egress_failed",
        "reason": decision.reason.value,
        "message": decision.message,
        "host": host[:255],
    }
    return http.Response.make(
        decision.status,
        json.dumps(body).encode() + b"\n",
        {"Content-Type": "application/json", "X-Egress-Denied": decision.reason.value},
    )
