"""The Python HTTP clients as a sandbox runs them: `python py_client.py CLIENT URL [OUT]`.

CLIENT is `requests`, `httpx` (with `http2=True`), `aiohttp` or `websocket` (aiohttp's
client). Each takes the proxy from the environment (`HTTPS_PROXY`, trust_env) and the CA
from its ecosystem's variable, sends its own `Authorization`, writes the body to OUT, and
prints one JSON line: `{"status", "version", "body_len"}` or, when the request failed,
`{"error": "<exception type>: <message>"}` (exit 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

OWN = {"Authorization": "Bearer sandbox-own-token"}


def with_requests(url: str, out: Path) -> dict[str, Any]:
    import requests

    response = requests.get(url, headers=OWN, timeout=60)
    out.write_bytes(response.content)
    return {"status": response.status_code, "version": response.raw.version}


def with_httpx(url: str, out: Path) -> dict[str, Any]:
    import httpx

    with httpx.Client(http2=True, timeout=60) as client:
        response = client.get(url, headers=OWN)
    out.write_bytes(response.content)
    return {"status": response.status_code, "version": response.http_version}


async def with_aiohttp(url: str, out: Path) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession(trust_env=True) as session, session.get(url, headers=OWN) as r:
        out.write_bytes(await r.read())
        return {"status": r.status, "version": f"{r.version.major}.{r.version.minor}"}


async def with_websocket(url: str) -> dict[str, Any]:
    import aiohttp

    # aiohttp's trust_env maps proxies by scheme and has none for wss://: pass it.
    proxy = os.environ.get("HTTPS_PROXY")  # none in transparent mode
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers=OWN, proxy=proxy) as ws,
    ):
        await ws.send_str("ping through the proxy")
        message = await ws.receive(timeout=30)
        return {"status": 101, "echo": message.data}


def main(argv: list[str]) -> int:
    client, url = argv[0], argv[1]
    out = Path(argv[2]) if len(argv) > 2 else Path("/dev/null")
    try:
        if client == "requests":
            result = with_requests(url, out)
        elif client == "httpx":
            result = with_httpx(url, out)
        elif client == "aiohttp":
            result = asyncio.run(with_aiohttp(url, out))
        elif client == "websocket":
            result = asyncio.run(with_websocket(url))
        else:
            raise SystemExit(f"unknown client {client}")
    except Exception as exc:  # noqa: BLE001 - the test reads how the client failed
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    if out.exists() and out != Path("/dev/null"):
        result["body_len"] = out.stat().st_size
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
