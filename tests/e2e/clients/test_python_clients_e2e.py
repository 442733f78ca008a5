"""Python clients through the proxy: requests, httpx (HTTP/2), aiohttp, a WebSocket.

CA recipes (README): requests reads `REQUESTS_CA_BUNDLE`; httpx and aiohttp read
`SSL_CERT_FILE` (OpenSSL's default paths). All take `HTTPS_PROXY` from the environment.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.clients.conftest import BASE_URL, HTTPS_PORT, WS_PORT, Clients
from tests.e2e.clients.expect import assert_injected_once, assert_no_secret

pytestmark = pytest.mark.netns

PY_CLIENT = Path(__file__).with_name("py_client.py")
RECIPES = {
    "requests": "REQUESTS_CA_BUNDLE",
    "httpx": "SSL_CERT_FILE",
    "aiohttp": "SSL_CERT_FILE",
}
REFUSALS = {  # how each client shows the proxy's 403 to a CONNECT
    "requests": "ProxyError: ",
    "httpx": "ProxyError: 403 Forbidden",
    "aiohttp": "ClientHttpProxyError: 403, message='Forbidden'",
}


def run(clients: Clients, client: str, url: str, out: Path | None = None) -> dict[str, Any]:
    argv = [sys.executable, str(PY_CLIENT), client, url] + ([str(out)] if out else [])
    result = clients.run(
        argv, clients.proxy_env(**{RECIPES.get(client, "SSL_CERT_FILE"): clients.ca})
    )
    assert_no_secret(clients, result.stdout, result.stderr)
    assert result.stdout, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("client", ["requests", "httpx", "aiohttp"])
def test_allowed_request_gets_the_credential_once(clients: Clients, client: str) -> None:
    mark = clients.nginx.mark()
    out = clients.home / f"{client}-headers.txt"
    answer = run(clients, client, f"{BASE_URL}/headers", out)
    assert answer["status"] == 200, answer
    assert out.read_text() == "ok\n"
    entry = assert_injected_once(clients, mark, "/headers")
    if client == "httpx":  # asked for HTTP/2: both legs really speak it
        assert answer["version"] == "HTTP/2"
        assert (entry["proto"], entry["alpn"]) == ("HTTP/2.0", "h2")


@pytest.mark.parametrize("client", ["requests", "httpx", "aiohttp"])
def test_refused_host_shows_the_403(clients: Clients, client: str) -> None:
    mark = clients.nginx.mark()
    answer = run(clients, client, f"https://notlisted.test:{HTTPS_PORT}/headers")
    assert REFUSALS[client] in answer["error"]
    if client == "requests":
        assert "403" in answer["error"]
    assert clients.nginx.since(mark) == []


@pytest.mark.parametrize("client", ["requests", "httpx", "aiohttp"])
def test_download_arrives_intact(clients: Clients, client: str) -> None:
    out = clients.home / f"{client}-big.bin"
    answer = run(clients, client, f"{BASE_URL}/big.bin", out)
    assert answer["status"] == 200, answer
    assert hashlib.sha256(out.read_bytes()).hexdigest() == clients.content.big_sha256
    out.unlink()


def test_websocket_upgrade_carries_the_injected_header(clients: Clients) -> None:
    mark = clients.ws_log.mark()
    answer = run(clients, "websocket", f"wss://api.allowed.test:{WS_PORT}/socket")
    assert answer == {"status": 101, "echo": "ping through the proxy"}
    upgrades = clients.ws_log.since(mark)
    assert [u["path"] for u in upgrades] == ["/socket"]
    authorization = [v for n, v in upgrades[0]["headers"] if n.lower() == "authorization"]
    assert authorization == [f"Bearer {clients.secret}"]
