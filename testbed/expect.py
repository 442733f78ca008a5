"""Assertions shared by the end-to-end tests: exact refusals, what reached the upstream.

A refusal is checked whole (docs/configuration.md#reason-codes): status, exactly one `X-Egress-Denied` with
the reason, a JSON body with `error`, `reason`, `message`, `host`. "Nothing reached
the upstream" means no new event at all in the upstream log (not even a TCP connect,
since the proxy must not connect before deciding) and none in the trap logs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from testbed.harness import REASONS, Harness
from testbed.rawhttp import Response


def header_values(record: dict[str, Any], name: str) -> list[str]:
    """Values of a header (any casing, every copy) as the upstream received them."""
    return [v for n, v in record["headers"] if n.lower() == name.lower()]


def assert_refused(
    response: Response, reason: str, status: int = 403, host: str | None = None
) -> dict[str, Any]:
    assert reason in REASONS
    detail = response.describe()
    assert response.status == status, f"expected {status} {reason}, got:\n{detail}"
    assert response.header_all("X-Egress-Denied") == [reason], detail
    content_type = response.header("Content-Type") or ""
    assert content_type.split(";")[0].strip() == "application/json", detail
    body = json.loads(response.body)
    # docs/decisions.md D1: a 502 (dns_failure) keeps the shape, with "egress_failed";
    # so does every failure (502, 504; D352).
    assert body["error"] == ("egress_failed" if status in (502, 504) else "egress_denied"), detail
    assert body["reason"] == reason, detail
    assert isinstance(body["message"], str), detail
    assert body["message"], detail
    assert "host" in body, detail
    if host is not None:
        assert body["host"] == host, detail
    return body


@dataclass
class Observed:
    """Upstream and trap events since the start of one test."""

    harness: Harness
    upstream_mark: int
    trap_mark: int

    @classmethod
    def start(cls, harness: Harness) -> Observed:
        return cls(harness, harness.upstream_log.mark(), harness.trap_log.mark())

    def upstream(self) -> list[dict[str, Any]]:
        return self.harness.upstream_log.since(self.upstream_mark)

    def requests(self) -> list[dict[str, Any]]:
        return [e for e in self.upstream() if e["event"] == "request"]

    def traps(self) -> list[dict[str, Any]]:
        return self.harness.trap_log.since(self.trap_mark) + [
            e for e in self.upstream() if e["event"] == "trap"
        ]

    def assert_nothing_reached(self) -> None:
        assert self.upstream() == [], f"reached the upstream namespace: {self.upstream()}"
        assert self.traps() == [], f"reached a trap: {self.traps()}"

    def only_request(self) -> dict[str, Any]:
        requests = self.requests()
        assert len(requests) == 1, f"expected one upstream request, got {requests}"
        assert self.traps() == [], f"reached a trap: {self.traps()}"
        return requests[0]
