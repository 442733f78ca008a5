"""End to end, WebSocket messages count toward the upload budget (issue 34): aiohttp's
WebSocket client through a proxy of the test's own to the real echo upstream
(testbed/ws_echo.py). The first message fits the entry's "1KiB/hour" and comes back; the
message that crosses it is dropped and the WebSocket closed, so no echo of it arrives."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest

from tests.e2e.clients.conftest import WS_PORT, Clients
from tests.e2e.conftest import PrivateProxy

pytestmark = pytest.mark.netns

CONFIG = """\
network:
  allowlist:
    - domain: api.allowed.test
      budget:
        upload: "1KiB/hour"
    - domain: 198.18.1.0/24
"""

CLIENT = """
import asyncio, json, os, sys
import aiohttp

async def main():
    out = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(sys.argv[1], proxy=os.environ["HTTPS_PROXY"]) as ws:
            for size in (600, 600):
                await ws.send_bytes(b"m" * size)
                message = await ws.receive(timeout=30)
                out.append(len(message.data) if message.type == aiohttp.WSMsgType.BINARY
                           else message.type.name)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_the_message_that_crosses_the_upload_budget_closes_the_websocket(
    clients: Clients, private_proxy: Callable[..., PrivateProxy]
) -> None:
    p = private_proxy("ws-budget", CONFIG)
    proxy = f"http://{p.view.proxy_host}:{p.view.proxy_port}"
    env = clients.env(HTTPS_PROXY=proxy, SSL_CERT_FILE=clients.ca)
    url = f"wss://api.allowed.test:{WS_PORT}/socket"
    result = clients.run([sys.executable, "-c", CLIENT, url], env)
    assert result.returncode == 0, result.stderr
    first, second = json.loads(result.stdout.splitlines()[-1])
    assert first == 600  # echoed: within the budget
    assert second in ("CLOSE", "CLOSED", "CLOSING", "ERROR")  # never echoed
    labels = (("budget", "upload"), ("rule", "api.allowed.test"))
    assert p.process.scrape()[("egress_budget_exceeded_total", labels)] == 1
