"""A refused HEAD gets the readable refusal without a body (RFC 9110 9.3.2), on HTTP/1
and on HTTP/2, where a DATA frame on a HEAD is a protocol error for the client (found by
the protocol fuzzer, docs/decisions.md D34)."""

from __future__ import annotations

import pytest

from testbed.expect import Observed
from testbed.h2client import exchange
from testbed.harness import Harness

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]


def test_http2_refused_head_has_headers_and_no_body(harness: Harness, obs: Observed) -> None:
    with harness.tunnel("api.allowed.test:443", alpn=["h2"]) as conn:
        result = exchange(
            conn.sock,
            [[(":method", "HEAD"), (":scheme", "https"), (":authority", "evil.test"),
              (":path", "/head")]],
        )  # fmt: skip
    assert result.status(1) == "403"
    assert result.headers[1]["x-egress-denied"] == "host_mismatch"
    assert result.bodies[1] == b""
    assert 1 in result.ended
    obs.assert_nothing_reached()


def test_http1_refused_head_has_headers_and_no_body(harness: Harness, obs: Observed) -> None:
    with harness.tunnel("api.allowed.test:443") as conn:
        response = conn.request("HEAD", "/head", [("Host", "evil.test")])
        again = conn.request("GET", "/after-head", [("Host", "evil.test")])
    assert (response.status, response.header("X-Egress-Denied"), response.body) == (
        403, "host_mismatch", b"")  # fmt: skip
    assert again.header("X-Egress-Denied") == "host_mismatch"  # the connection still frames
    obs.assert_nothing_reached()
