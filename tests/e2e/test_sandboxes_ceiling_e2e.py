"""End to end, the node's ceiling over its sandboxes (issue 30, docs/configuration.md#sandboxes):
the real proxy, real sockets, real TLS.

A sandbox file that marks a host `passthrough` does not get its tunnel relayed when the
node's entry for that host has rules: the tunnel is intercepted and every request inside
is judged by the node's entry too, so a `DELETE` the node refuses reaches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.expect import Observed, assert_refused
from testbed.harness import Harness
from testbed.rawhttp import Response
from tests.e2e.conftest import PrivateProxy
from tests.e2e.test_sandboxes_e2e import basic

pytestmark = pytest.mark.netns

ALPHA_TOKEN = "alpha-proxy-token-0123456789"

NODE = """\
network:
  allowlist:
    - domain: api.allowed.test
      rules:
        - methods: [GET, HEAD]
    - domain: 198.18.1.0/24               # the upstreams' range (198.18/15 is reserved)
sandboxes:
  directory: {directory}
  identify: [proxy_auth]
"""

PASSTHROUGH = f"""\
token: "{ALPHA_TOKEN}"
network:
  allowlist:
    - domain: api.allowed.test
      passthrough: true
    - domain: 198.18.1.0/24
"""


def node_proxy(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, **files: str
) -> PrivateProxy:
    directory = tmp_path / "sandboxes"
    directory.mkdir()
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(text)
    return private_proxy("ceiling", NODE.format(directory=directory))


def https_as(view: Harness, credential: str, method: str, host: str, path: str = "/") -> Response:
    """CONNECT with the credential, TLS with the proxy's CA trusted, one request inside."""
    with view.conn() as conn:
        response = conn.connect(f"{host}:443", [("Proxy-Authorization", credential)])
        assert response.status == 200, response.describe()
        conn.start_tls(view.client_tls(), host)
        return conn.request(method, path, [("Host", host), ("Content-Length", "0")])


def test_a_sandbox_passthrough_does_not_lift_the_nodes_rules(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p = node_proxy(private_proxy, tmp_path, alpha=PASSTHROUGH)
    alpha = basic("alpha", ALPHA_TOKEN)
    mark = p.view.audit_log.mark()

    # Intercepted, not relayed: the client's TLS ends at the proxy (its CA), and the node's
    # rules refuse the DELETE before anything goes upstream.
    refused = https_as(p.view, alpha, "DELETE", "api.allowed.test", "/repos/acme/web")
    assert_refused(refused, "rule_mismatch", host="api.allowed.test")
    obs.assert_nothing_reached()

    allowed = https_as(p.view, alpha, "GET", "api.allowed.test", "/repos/acme/web")
    assert allowed.status == 200, allowed.describe()
    assert obs.only_request()["target"] == "/repos/acme/web"
    assert obs.only_request()["method"] == "GET"

    lines = p.view.audit_log.wait_count(mark, 4)
    assert [(a["method"], a["decision"], a["reason"], a.get("sandbox")) for a in lines] == [
        ("CONNECT", "allow", "allowlisted", "alpha"),
        ("DELETE", "deny", "rule_mismatch", "alpha"),
        ("CONNECT", "allow", "allowlisted", "alpha"),
        ("GET", "allow", "allowlisted", "alpha"),
    ]
