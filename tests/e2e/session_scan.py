"""What the session proxy must never have done, read from everything it wrote.

`leaks` (a transform secret, or its base64, in the proxy's output, the audit log,
/metrics, a response header or a refusal body), `traps` (a trap address reached) and
`errors` (a traceback or an addon error in the proxy's output). tests/e2e/test_leaks_e2e.py
calls them after the traffic most likely to leak; the session `harness` fixture calls
`problems` as it ends, so every process of `make test` has its own session proxy scanned,
not only the one the leak tests ran on (D700).
"""

from __future__ import annotations

import base64

from testbed.harness import Harness


def urlsafe(secret: str) -> str:
    return base64.urlsafe_b64encode(secret.encode()).decode().rstrip("=")


def spellings(secret: str) -> list[str]:
    """The secret, and its base64 (standard and URL-safe, without the last characters,
    which a neighbour's bits may change)."""
    return [secret, base64.b64encode(secret.encode()).decode()[:-4], urlsafe(secret)[:-3]]


def leaks(harness: Harness) -> list[str]:
    """Where a secret was found."""
    places: dict[str, str] = {
        "proxy stdout": harness.proxy_stdout.read_text(errors="replace"),
        "proxy stderr": harness.proxy_stderr.read_text(errors="replace"),
        "audit log": harness.audit_log.path.read_text(errors="replace"),
        "/metrics": harness.metrics_text(),
    }
    for i, response in enumerate(harness.responses):
        places[f"response {i} headers"] = repr(response.headers)
        if response.header_all("X-Egress-Denied") or response.status >= 400:
            places[f"response {i} refusal body"] = response.body.decode(errors="replace")
    return [
        where
        for secret in harness.secrets
        for where, text in places.items()
        for spelled in spellings(secret)
        if spelled in text
    ]


def traps(harness: Harness) -> list[dict]:
    """Every trap reached since the session began."""
    reached = harness.trap_log.since(harness.trap_baseline)
    return reached + [
        e for e in harness.upstream_log.since(harness.upstream_baseline) if e["event"] == "trap"
    ]


def errors(harness: Harness) -> list[str]:
    """The proxy's output lines that say an addon failed or show a traceback."""
    return [
        f"{path.name}: {line}"
        for path in (harness.proxy_stdout, harness.proxy_stderr)
        for line in path.read_text(errors="replace").splitlines()
        if "Traceback" in line or "Addon error" in line
    ]


def problems(harness: Harness) -> dict[str, list]:
    """Each scan's findings, the empty ones left out."""
    found = {"leaks": leaks(harness), "traps": traps(harness), "errors": errors(harness)}
    return {name: items for name, items in found.items() if items}
