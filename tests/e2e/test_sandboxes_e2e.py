"""End to end, many sandboxes in one proxy (issue 23, docs/configuration.md#sandboxes): the real proxy, real sockets.

Two sandboxes on one node proxy, each identified by its proxy credentials, each reaching
only its own hosts with its own injected header; a wrong or missing credential gets 407 and
nothing else; a client no sandbox claims gets 403 `unknown_sandbox`; the directory is
watched: a changed file takes effect, an invalid one keeps the last good policy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed, assert_refused, header_values
from testbed.harness import Harness
from testbed.rawhttp import Response
from tests.e2e.conftest import PrivateProxy
from tests.e2e.sandbox_node import (
    basic,
    node_config,
    node_proxy,
    wait_loads,
    write_sandboxes,
)

pytestmark = pytest.mark.netns

ALPHA_TOKEN, BETA_TOKEN = "alpha-proxy-token-0123456789", "beta-proxy-token-9876543210"

ALPHA = f"""\
token: "{ALPHA_TOKEN}"
class: agents
network:
  allowlist:
    - domain: api.allowed.test
      transform:
        X-Sandbox-Key: alpha-credential-value
    - domain: 198.18.1.0/24
"""

BETA = f"""\
token: "{BETA_TOKEN}"
class: ci
network:
  allowlist:
    - domain: other.allowed.test
      transform:
        X-Sandbox-Key: beta-credential-value
    - domain: notlisted.test          # outside the node's ceiling
    - domain: 198.18.1.0/24
"""


def https_as(view: Harness, credential: str | None, host: str, path: str = "/") -> Response:
    """CONNECT (with the credential, when given), TLS, one GET inside."""
    auth = [("Proxy-Authorization", credential)] if credential is not None else []
    with view.conn() as conn:
        response = conn.connect(f"{host}:443", auth)
        if response.status != 200:
            return response
        conn.start_tls(view.client_tls(), host)
        return conn.request("GET", path, [("Host", host)])


def plain_as(view: Harness, credential: str | None, host: str, path: str = "/") -> Response:
    auth = [("Proxy-Authorization", credential)] if credential is not None else []
    with view.conn() as conn:
        headers = [("Host", host), *auth, ("Connection", "close")]
        return conn.request("GET", f"http://{host}{path}", headers)


def test_two_sandboxes_each_reach_only_their_own_hosts(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", alpha=ALPHA, beta=BETA)
    alpha, beta = basic("alpha", ALPHA_TOKEN), basic("beta", BETA_TOKEN)
    mark = p.view.audit_log.mark()

    assert https_as(p.view, alpha, "api.allowed.test", "/alpha").status == 200
    record = obs.only_request()
    assert header_values(record, "X-Sandbox-Key") == ["alpha-credential-value"]
    assert header_values(record, "Proxy-Authorization") == []
    assert_refused(https_as(p.view, alpha, "other.allowed.test"), "not_allowlisted")
    assert_refused(https_as(p.view, beta, "api.allowed.test"), "not_allowlisted")
    assert_refused(https_as(p.view, beta, "notlisted.test"), "not_allowlisted")  # node ceiling
    assert len(obs.requests()) == 1

    beta_response = plain_as(p.view, beta, "other.allowed.test", "/beta-plain")
    assert_refused(beta_response, "plaintext_credentials")  # its own transform: TLS only
    assert https_as(p.view, beta, "other.allowed.test", "/beta").status == 200
    record = obs.requests()[-1]
    assert record["target"] == "/beta"
    assert header_values(record, "X-Sandbox-Key") == ["beta-credential-value"]
    assert header_values(record, "Proxy-Authorization") == []

    lines = p.view.audit_log.wait_count(mark, 8)
    assert {(a["method"], a["host"], a.get("sandbox"), a["decision"]) for a in lines} >= {
        ("CONNECT", "api.allowed.test", "alpha", "allow"),
        ("GET", "api.allowed.test", "alpha", "allow"),
        ("CONNECT", "other.allowed.test", "alpha", "deny"),
        ("GET", "other.allowed.test", "beta", "allow"),
    }
    text = p.process.metrics_text()
    assert 'egress_sandbox_connections{sandbox_class="agents"}' in text
    assert "alpha" not in text and "beta" not in text  # a sandbox id is never a label
    for secret in (ALPHA_TOKEN, BETA_TOKEN):
        assert secret not in p.process.audit.read_text()
        assert secret not in p.view.proxy_stderr.read_text()


@pytest.mark.parametrize(
    "credential",
    [None, basic("alpha", BETA_TOKEN), basic("gamma", ALPHA_TOKEN), "Bearer " + ALPHA_TOKEN],
    ids=["none", "other-sandbox-token", "unknown-id", "not-basic"],
)
def test_a_missing_or_wrong_credential_gets_407_and_nothing_else(
    private_proxy: Callable[..., PrivateProxy],
    tmp_path: Path,
    obs: Observed,
    credential: str | None,
) -> None:
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", alpha=ALPHA, beta=BETA)
    for response in (
        https_as(p.view, credential, "api.allowed.test"),
        plain_as(p.view, credential, "api.allowed.test"),
    ):
        assert response.status == 407, response.describe()
        assert response.header_all("Proxy-Authenticate") == ['Basic realm="egress-proxy"']
        assert response.header("X-Egress-Denied") is None
        assert response.body == b""
    obs.assert_nothing_reached()
    lines = p.view.audit_log.wait_count(0, 2)
    assert [(a["method"], a["status"], a["reason"]) for a in lines] == [
        ("CONNECT", 407, "unknown_sandbox"),
        ("GET", 407, "unknown_sandbox"),
    ]


def test_a_keep_alive_connection_keeps_its_identity(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", alpha=ALPHA)
    alpha = basic("alpha", ALPHA_TOKEN)
    with p.view.conn() as conn:
        first = conn.request(
            "GET",
            "http://other.allowed.test/1",
            [("Host", "other.allowed.test"), ("Proxy-Authorization", alpha)],
        )
        second = conn.request(
            "GET", "http://other.allowed.test/2", [("Host", "other.allowed.test")]
        )
    assert_refused(first, "not_allowlisted")  # alpha's own allowlist, not the node's
    assert_refused(second, "not_allowlisted")
    obs.assert_nothing_reached()


def test_the_directory_is_watched_and_an_invalid_file_keeps_the_last_good(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p, directory = node_proxy(private_proxy, tmp_path, "proxy_auth", alpha=ALPHA, beta=BETA)
    alpha, beta = basic("alpha", ALPHA_TOKEN), basic("beta", BETA_TOKEN)
    wait_loads(p, "ok", 2)
    assert_refused(https_as(p.view, beta, "api.allowed.test"), "not_allowlisted")

    (directory / "beta.yaml").write_text(BETA.replace("other.allowed.test", "api.allowed.test"))
    wait_loads(p, "ok", 3)
    assert https_as(p.view, beta, "api.allowed.test", "/changed").status == 200
    assert header_values(obs.only_request(), "X-Sandbox-Key") == ["beta-credential-value"]

    (directory / "alpha.yaml").write_text(ALPHA + "    - domain: '**'\n")
    wait_loads(p, "failed", 1)
    assert https_as(p.view, alpha, "api.allowed.test", "/last-good").status == 200
    assert "alpha.yaml:9:7: network.allowlist[2].domain" in p.view.proxy_stderr.read_text()
    assert p.process.scrape()[("egress_sandbox_files_invalid", ())] == 1

    (directory / "beta.yaml").unlink()
    procs.wait_until(
        "beta removed",
        lambda: p.process.scrape()[("egress_sandboxes", ())] == 1,
        timeout=10,
    )
    response = https_as(p.view, beta, "api.allowed.test")
    assert response.status == 407, response.describe()


def test_source_address_identifies_and_an_unclaimed_client_is_unknown(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    p, directory = node_proxy(private_proxy, tmp_path, "source_address", beta=BETA)
    assert_refused(https_as(p.view, None, "api.allowed.test"), "unknown_sandbox")
    assert_refused(plain_as(p.view, None, "api.allowed.test"), "unknown_sandbox")
    obs.assert_nothing_reached()

    claimed = ALPHA + f"addresses: [{p.view.client_ip}]\n"
    (directory / "alpha.yaml").write_text(claimed)
    wait_loads(p, "ok", 2)
    assert https_as(p.view, None, "api.allowed.test", "/by-address").status == 200
    assert header_values(obs.only_request(), "X-Sandbox-Key") == ["alpha-credential-value"]


def test_one_sandbox_cannot_take_the_connections_of_another(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path
) -> None:
    directory = write_sandboxes(tmp_path, {"alpha": ALPHA, "beta": BETA})
    node = node_config(directory).replace("  identify:", "  max_connections: 2\n  identify:")
    p = private_proxy("bounded", node)
    alpha, beta = basic("alpha", ALPHA_TOKEN), basic("beta", BETA_TOKEN)
    held = []
    try:
        for _ in range(2):
            conn = p.view.conn()
            held.append(conn)
            assert (
                conn.connect("api.allowed.test:443", [("Proxy-Authorization", alpha)]).status == 200
            )
        refused = p.view.conn()
        held.append(refused)
        response = refused.connect("api.allowed.test:443", [("Proxy-Authorization", alpha)])
        assert_refused(response, "connection_limit", status=429)
        assert response.header("Retry-After") == "1"
        assert https_as(p.view, beta, "other.allowed.test").status == 200  # beta unaffected
    finally:
        for conn in held:
            conn.close()
    samples = p.process.scrape()
    assert (
        samples[("egress_sandbox_connection_refusals_total", (("sandbox_class", "agents"),))] == 1
    )


def test_report_only_is_per_sandbox(
    private_proxy: Callable[..., PrivateProxy], tmp_path: Path, obs: Observed
) -> None:
    trying = BETA.replace("network:\n", "network:\n  report_only: true\n")
    p, _ = node_proxy(private_proxy, tmp_path, "proxy_auth", alpha=ALPHA, beta=trying)
    mark = p.view.audit_log.mark()
    response = https_as(p.view, basic("beta", BETA_TOKEN), "api.allowed.test", "/trial")
    assert response.status == 200, response.describe()
    assert header_values(obs.only_request(), "X-Sandbox-Key") == []  # nothing injected
    assert_refused(
        https_as(p.view, basic("alpha", ALPHA_TOKEN), "other.allowed.test"), "not_allowlisted"
    )
    lines = p.view.audit_log.wait_count(mark, 3)
    assert [(a["sandbox"], a["method"], a["decision"]) for a in lines] == [
        ("beta", "CONNECT", "would_deny"),
        ("beta", "GET", "would_deny"),
        ("alpha", "CONNECT", "deny"),
    ]
