"""Node.js through the proxy (issue 13). Node 20 has no proxy support in core: the two
agent libraries people use are tested, `https-proxy-agent` and undici's
`EnvHttpProxyAgent` (docs/operations.md). CA recipe: `NODE_EXTRA_CA_CERTS`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.clients.conftest import BASE_URL, HTTPS_PORT, Clients
from tests.e2e.clients.expect import assert_injected_once, assert_no_secret

pytestmark = pytest.mark.netns

NODE_CLIENT = Path(__file__).with_name("node_client.cjs")
AGENTS = ["https-proxy-agent", "undici"]


def run(clients: Clients, agent: str, url: str, out: Path | None = None) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "the client suite needs node (scripts/install-test-deps)"
    env = clients.proxy_env(
        NODE_EXTRA_CA_CERTS=clients.ca, CLIENT_NODE_MODULES=str(clients.node_modules)
    )
    result = clients.run([node, str(NODE_CLIENT), agent, url] + ([str(out)] if out else []), env)
    assert_no_secret(clients, result.stdout, result.stderr)
    assert result.stdout, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("agent", AGENTS)
def test_allowed_request_gets_the_credential_once(clients: Clients, agent: str) -> None:
    mark = clients.nginx.mark()
    answer = run(clients, agent, f"{BASE_URL}/headers")
    assert answer == {"status": 200, "bytes": 3}
    assert_injected_once(clients, mark, "/headers")


@pytest.mark.parametrize("agent", AGENTS)
def test_refused_host_shows_the_403(clients: Clients, agent: str) -> None:
    mark = clients.nginx.mark()
    answer = run(clients, agent, f"https://notlisted.test:{HTTPS_PORT}/headers")
    if agent == "https-proxy-agent":  # replays the proxy's refusal as the response
        assert answer["status"] == 403, answer
    else:
        assert "Proxy response (403) !== 200 when HTTP Tunneling" in answer["error"], answer
    assert clients.nginx.since(mark) == []


@pytest.mark.parametrize("agent", AGENTS)
def test_download_arrives_intact(clients: Clients, agent: str) -> None:
    out = clients.home / f"node-{agent}-big.bin"
    answer = run(clients, agent, f"{BASE_URL}/big.bin", out)
    assert answer["status"] == 200, answer
    assert hashlib.sha256(out.read_bytes()).hexdigest() == clients.content.big_sha256
    out.unlink()
