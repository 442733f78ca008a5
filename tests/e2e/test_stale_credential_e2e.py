"""End to end, a credential served stale is visible (issue 48, D403): a `file` credential
whose file disappears keeps being injected within `max_stale`, and while it is, the proxy
counts each such request in `egress_credential_stale_served_total` and says so once on
stderr (the credential's name and the source's reason, never the value)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import Observed, header_values
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

VALUE = "stale-file-s3cret-" + "7c" * 8


def test_a_credential_served_stale_is_counted_and_logged_once(
    private_proxy: Callable[..., PrivateProxy], e2e_dir: Path, obs: Observed
) -> None:
    token = e2e_dir / "stale-token"
    token.write_text(VALUE + "\n")
    config = f"""\
credentials:
  tok: {{file: {{path: {token}, ttl: 1s, max_stale: 1h, failure_ttl: 1s}}}}
network:
  allowlist:
    - domain: api.allowed.test
      credential: {{name: tok, as: bearer}}
    - domain: 198.18.1.0/24   # the test upstream's reserved range
"""
    p = private_proxy("stale", config)
    assert p.view.https("api.allowed.test:443", "/fresh").status == 200
    token.unlink()
    time.sleep(1.2)  # past the ttl: the next request re-reads the file, and fails
    answers = [p.view.https("api.allowed.test:443", f"/stale-{n}").status for n in range(3)]
    assert answers == [200, 200, 200]
    sent = [header_values(r, "Authorization") for r in obs.requests()]
    assert sent == [[f"Bearer {VALUE}"]] * 4  # the last value, as max_stale allows
    samples = p.process.scrape()
    assert samples[("egress_credential_stale_served_total", (("credential", "tok"),))] == 3
    stderr = p.process.child.stderr.read_text()
    lines = [line for line in stderr.splitlines() if "serving its last value stale" in line]
    assert len(lines) == 1, stderr
    assert "credential tok: serving its last value stale (max_stale)" in lines[0]
    assert str(token) in lines[0] and VALUE not in stderr
