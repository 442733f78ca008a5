"""End to end, `egress-proxy usage` with the memory backend (issue 46, D570-D572): a real
proxy process spends model API tokens at the test model server (testbed/model_server.py)
for two sandboxes of a node proxy, and for a client of `--workers 2`; the CLI asks the
running proxy's admin API (`GET /usage` on its metrics address, with the token of
`run --admin-token-file`) and prints each one's spent and left exactly; without the token,
or with another, the API answers 401 and the CLI says so."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.harness import Harness
from tests.e2e.conftest import EGRESS_PROXY, SECRET_ENV, PrivateProxy
from tests.e2e.sandbox_node import basic, write_sandboxes
from tests.e2e.test_llm_e2e import PORT, calls, config, model_log  # noqa: F401 (a fixture)

pytestmark = pytest.mark.netns

TOKEN = "usage-admin-token-0123456789"
NODE = """\
network:
  allowlist:
    - domain: "*.allowed.test"
      ports: [{port}]
    - domain: 198.18.1.0/24
sandboxes:
  directory: {directory}
  identify: [proxy_auth]
"""
SANDBOX = """\
token: "{token}"
network:
  allowlist:
    - domain: api.allowed.test
      ports: [{port}]
      llm: {{api: openai, budget: {{tokens: "{tokens}"}}}}
    - domain: 198.18.1.0/24
"""
ALPHA_TOKEN, BETA_TOKEN = "alpha-proxy-token-0123456789", "beta-proxy-token-9876543210"


def spend(view: Harness, sandbox: str, token: str, usage: str) -> int:
    """One chat completion as `sandbox`, the model server reporting `usage` (IN,OUT)."""
    body = json.dumps({"model": "gpt-5-mini", "messages": [{"role": "user", "content": "hi"}]})
    authority = f"api.allowed.test:{PORT}"
    with view.conn() as conn:
        connected = conn.connect(authority, [("Proxy-Authorization", basic(sandbox, token))])
        assert connected.status == 200
        conn.start_tls(view.client_tls(), "api.allowed.test")
        headers = [("Host", authority), ("Content-Type", "application/json"),
                   ("X-Test-Usage", usage)]  # fmt: skip
        return conn.request("POST", "/v1/chat/completions", headers, body.encode()).status


def usage(
    p: PrivateProxy, file: Path, token: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    metrics = f"{p.view.metrics_host}:{p.view.metrics_port}"
    argv = [str(EGRESS_PROXY), "usage", "--config", str(file), "--metrics", metrics,
            "--admin-token-file", str(token), *extra]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", SECRET_ENV: p.view.secrets[0]}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def token_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text + "\n")
    return path


@pytest.mark.usefixtures("model_log")
def test_usage_asks_the_running_proxy_for_each_sandbox(
    private_proxy: Callable[..., PrivateProxy],
    tmp_path: Path,
) -> None:
    sandboxes = {
        name: SANDBOX.format(token=secret, port=PORT, tokens=tokens)
        for name, secret, tokens in (
            ("alpha", ALPHA_TOKEN, "1000/day"),
            ("beta", BETA_TOKEN, "5k/day"),
        )
    }
    node = tmp_path / "node.yaml"
    node.write_text(NODE.format(port=PORT, directory=write_sandboxes(tmp_path, sandboxes)))
    admin = token_file(tmp_path, "admin-token", TOKEN)
    p = private_proxy("usage-node", node.read_text(), "--admin-token-file", str(admin))
    mark = p.view.audit_log.mark()
    assert [spend(p.view, "alpha", ALPHA_TOKEN, "200,100") for _ in range(2)] == [200, 200]
    assert spend(p.view, "beta", BETA_TOKEN, "10,5") == 200
    p.view.audit_log.wait_count(mark, 3)  # each call's charge went out before its audit line
    done = usage(p, node, admin)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "alpha\tapi.allowed.test\ttokens 600 of 1000/day (400 left)",
        "beta\tapi.allowed.test\ttokens 15 of 5000/day (4985 left)",
    ]
    one = usage(p, node, admin, "--sandbox", "beta")
    assert (one.returncode, one.stdout) == (
        0,
        "beta\tapi.allowed.test\ttokens 15 of 5000/day (4985 left)\n",
    )
    # another token, and none: 401, nothing of the spending said
    wrong = usage(p, node, token_file(tmp_path, "wrong", "another-token-0123456789"))
    assert (wrong.returncode, wrong.stdout, wrong.stderr) == (
        1,
        "",
        "egress-proxy: usage: 401 unauthorized\n",
    )
    import http.client

    connection = http.client.HTTPConnection(p.view.metrics_host, p.view.metrics_port, timeout=10)
    try:
        connection.request("GET", "/usage")
        response = connection.getresponse()
        assert (response.status, response.read()) == (401, b'{"error": "unauthorized"}\n')
    finally:
        connection.close()


@pytest.mark.usefixtures("model_log")
def test_usage_asks_the_parent_of_two_workers(
    private_proxy: Callable[..., PrivateProxy],
    tmp_path: Path,
) -> None:
    """Without sandboxes the spender is the client; the node's memory is the parent's."""
    text = config(tokens="1000/day").replace('cost: "1USD/day"', 'cost: "0.001USD/day"')
    file = tmp_path / "workers.yaml"
    file.write_text(text)
    admin = token_file(tmp_path, "admin-token", TOKEN)
    p = private_proxy("usage-workers", text, "--workers", "2", "--admin-token-file", str(admin))
    mark = p.view.audit_log.mark()
    assert calls(p.view, 2, "200,100") == [200, 200]
    p.view.audit_log.wait_count(mark, 2)
    done = usage(p, file, admin)
    assert (done.returncode, done.stderr) == (0, "")
    # 2 x (200 x 0.25 + 100 x 2.0) micro-USD = 0.0005 USD (43 s to refill one more digit)
    assert done.stdout == (
        f"client-{p.view.client_ip}\tapi.allowed.test\ttokens 600 of 1000/day (400 left)"
        "\tcost 0.000500 USD of 0.001000 USD/day (0.000500 USD left)\n"
    )
    wrong = usage(p, file, token_file(tmp_path, "wrong", "another-token-0123456789"))
    assert (wrong.returncode, wrong.stdout) == (1, "")
