"""An upstream whose certificate does not verify gets the project's refusal (issue 21):
a JSON 502 with `X-Egress-Denied: upstream_tls`, the host in the log, an honest audit line."""

from __future__ import annotations

import json
from collections.abc import Callable

import certifi
import pytest

from testbed.h2client import exchange
from testbed.harness import Harness
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

CONFIG = """\
network:
  allowlist:
    - domain: "*.allowed.test"
    - domain: 198.18.1.0/24
"""


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_an_unverifiable_upstream_certificate_is_a_readable_refusal(
    private_proxy: Callable[..., PrivateProxy], harness: Harness, method: str
):
    # The public roots only: the test upstreams' private CA is not trusted.
    p = private_proxy("untrusted", CONFIG, "--upstream-ca", certifi.where())
    view: Harness = p.view
    response = view.https("api.allowed.test:443", "/untrusted", method=method)

    assert response.status == 502, response.describe()
    assert response.header("X-Egress-Denied") == "upstream_tls"
    if method == "GET":
        body = response.json()
        assert (body["error"], body["reason"], body["host"]) == (
            "egress_failed",
            "upstream_tls",
            "api.allowed.test",
        )
    line = view.audit_log.wait_for(0, lambda e: e.get("method") == method)
    assert (line["decision"], line["reason"], line["status"]) == ("deny", "upstream_tls", 502)
    assert "api.allowed.test" in view.proxy_stderr.read_text()


def test_an_http2_client_gets_the_same_refusal(
    private_proxy: Callable[..., PrivateProxy], harness: Harness
):
    p = private_proxy("untrusted-h2", CONFIG, "--upstream-ca", certifi.where())
    with p.view.tunnel("api.allowed.test:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [
                [
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":authority", "api.allowed.test"),
                    (":path", "/untrusted-h2"),
                ]
            ],
        )

    assert result.status(1) == "502", result.headers
    assert result.headers[1].get("x-egress-denied") == "upstream_tls"
    assert json.loads(result.bodies[1])["reason"] == "upstream_tls"
