"""End to end, the node's ceiling over its sandboxes (issue 30, docs/configuration.md#sandboxes):
the real proxy, real sockets, real TLS.

A sandbox file that marks a host `passthrough` does not get its tunnel relayed when the
node's entry for that host has rules: the tunnel is intercepted and every request inside
is judged by the node's entry too, so a `DELETE` the node refuses reaches nothing. One
sandbox cannot send another's placeholder (D179), and a sandbox file repeating one is
refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed, assert_refused, header_values
from testbed.harness import Harness
from testbed.netns import UPSTREAM_IP
from testbed.rawhttp import Response
from tests.e2e.conftest import PrivateProxy
from tests.e2e.sandbox_node import basic, node_config, request_as, wait_loads, write_sandboxes

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
    return private_proxy("ceiling", NODE.format(directory=write_sandboxes(tmp_path, files)))


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


BETA_TOKEN = "beta-proxy-token-9876543210"
GAMMA_TOKEN = "gamma-proxy-token-5555555555"
ALPHA_PH, BETA_PH = "alpha-egress-placeholder", "beta-egress-placeholder"
ALPHA_VALUE, BETA_VALUE = "alpha-real-key-0123456789", "beta-real-key-9876543210"


def holding(token: str, placeholder: str, value: str) -> str:
    return f"""\
token: "{token}"
network:
  allowlist:
    - domain: api.allowed.test
      secrets: [{{placeholder: "{placeholder}", value: "{value}"}}]
    - domain: other.allowed.test
    - domain: 198.18.1.0/24
"""


def test_one_sandbox_never_gets_anothers_secret_through_its_placeholder(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    files = {
        "alpha": holding(ALPHA_TOKEN, ALPHA_PH, ALPHA_VALUE),
        "beta": holding(BETA_TOKEN, BETA_PH, BETA_VALUE),
    }
    directory = write_sandboxes(tmp_path, files)
    p = private_proxy("placeholders", node_config(directory), "--watch-interval", "0.2")
    alpha = basic("alpha", ALPHA_TOKEN)

    own = request_as(p.view, alpha, "api.allowed.test", [("Authorization", f"Bearer {ALPHA_PH}")])
    assert own.status == 200, own.describe()
    assert header_values(obs.only_request(), "Authorization") == [f"Bearer {ALPHA_VALUE}"]

    # Beta's placeholder sent by alpha is worth nothing: never swapped for beta's secret,
    # and none of alpha's concern (D425: beta's less-trusted file never refuses alpha).
    for host, fields in (
        ("api.allowed.test", [("Authorization", f"Bearer {BETA_PH}")]),  # beta's, same host
        ("other.allowed.test", [(f"X-{BETA_PH}", "1")]),  # in a header name
    ):
        sent = request_as(p.view, alpha, host, fields)
        assert sent.status == 200, sent.describe()
        assert obs.requests()[-1]["headers"][1:] == [list(f) for f in fields]
    assert len(obs.requests()) == 3

    # A third sandbox file binding alpha's placeholder to its own secret is its own business
    # (D342): gamma's request is swapped from gamma's file, alpha's from alpha's.
    (directory / "gamma.yaml").write_text(holding(GAMMA_TOKEN, ALPHA_PH, "gamma-real-key-000"))
    wait_loads(p, "ok", 3)
    gamma = request_as(
        p.view,
        basic("gamma", GAMMA_TOKEN),
        "api.allowed.test",
        [("Authorization", f"Bearer {ALPHA_PH}")],
    )
    assert gamma.status == 200, gamma.describe()
    assert header_values(obs.requests()[-1], "Authorization") == ["Bearer gamma-real-key-000"]
    again = request_as(p.view, alpha, "api.allowed.test", [("Authorization", f"Bearer {ALPHA_PH}")])
    assert again.status == 200, again.describe()
    assert header_values(obs.requests()[-1], "Authorization") == [f"Bearer {ALPHA_VALUE}"]
    for secret in (ALPHA_VALUE, BETA_VALUE):
        assert secret not in p.process.audit.read_text()
        assert secret not in p.view.proxy_stderr.read_text()


RAW_NODE = """\
network:
  allowlist:
    - domain: 198.18.1.0/24               # the upstreams' range, HTTP GET only
      rules:
        - methods: [GET]
sandboxes:
  directory: {directory}
  identify: [proxy_auth]
"""

RAW_SANDBOX = f"""\
token: "{ALPHA_TOKEN}"
network:
  allowlist:
    - domain: 198.18.1.0/24               # no rules: alone it would open raw TCP
"""


def test_raw_tcp_through_a_sandbox_does_not_lift_the_nodes_rules(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p = private_proxy(
        "raw", RAW_NODE.format(directory=write_sandboxes(tmp_path, {"alpha": RAW_SANDBOX}))
    )
    mark = p.view.audit_log.mark()
    # mitmproxy relays what does not start like an HTTP method as raw TCP: the node's
    # entry has rules, so the stream is refused and the connection closed.
    with p.view.conn() as conn:
        credential = [("Proxy-Authorization", basic("alpha", ALPHA_TOKEN))]
        assert conn.connect(f"{UPSTREAM_IP}:80", credential).status == 200
        conn.send(b"SSH-2.0-OpenSSH_9.6 sandbox\r\n")
        received = b""
        try:
            while chunk := conn.sock.recv(4096):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert received == b"", received
    obs.assert_nothing_reached()
    lines = p.view.audit_log.wait_count(mark, 1)
    assert [(a["method"], a["decision"], a.get("sandbox")) for a in lines] == [
        ("CONNECT", "allow", "alpha"),  # rules judge what is inside the tunnel
    ]
    # The raw stream is counted, not audited (1.6): refused, nothing for the rules to judge.
    key = ("egress_decisions_total", (("decision", "deny"), ("reason", "rule_mismatch"),
                                      ("stage", "tcp")))  # fmt: skip
    procs.wait_until(
        "the raw stream counted as refused",
        lambda: p.process.scrape().get(key, 0) == 1,
        timeout=10,
        child=p.process.child,
    )
