"""Who owns a py-spy frame (bench/profile.py): our folders under the import package too."""

from __future__ import annotations

import pytest

from bench.profile import owner


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("AuditLog.write_lines (sandbox_egress/proxy/audit.py:120)", "ours"),
        ("LeanAddonManager._trigger (sandbox_egress/runtime/engine.py)", "ours"),
        ("Requests.requestheaders (addons/request.py:40)", "ours"),
        ("main (sandbox_egress/runtime/cli.py:12)", "ours: entry point"),
        ("serve (sandbox_egress/runtime/launcher.py:90)", "ours: entry point"),
        ("Layer.handle_event (mitmproxy/proxy/layer.py:150)", "mitmproxy"),
        ("Handle._run (asyncio/events.py:84)", "stdlib"),
        ("Connection.recv (OpenSSL/SSL.py:1800)", "third-party: OpenSSL"),
    ],
)
def test_owner_of_a_frame(frame: str, expected: str) -> None:
    assert owner(frame) == expected
