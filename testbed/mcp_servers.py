"""Two real MCP servers that route more than one spelling of their endpoint to the MCP
handler, for tests/e2e/test_mcp_servers_e2e.py (issue 43):

* Express with the official TypeScript SDK (testbed/mcp_express.js): Express ignores case
  and a trailing slash. `express_modules` installs the SDK and Express (pinned) into
  `.cache/mcp-express` of the repository with npm, once, as testbed/claude_code.py does
  for its CLI.
* Starlette with the official Python SDK mounted at `/mcp` (`Mount("/mcp", app=...)`,
  this module's `main`): everything below the prefix reaches the handler.

Both answer over TLS (the test CA), stateless, in JSON; each appends every tool call to
`--log` (one JSON line) before answering, so a test proves a refused call never came.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Mount

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "mcp-express"
PACKAGES = ("@modelcontextprotocol/sdk@1.32.2", "express@5.3.0")
NPM_TIMEOUT = 600.0
EXPRESS_SCRIPT = Path(__file__).with_name("mcp_express.js")


def express_modules() -> Path:
    """The `node_modules` holding the pinned SDK and Express, installed when missing."""
    modules = CACHE / "node_modules"
    marker = CACHE / ".installed"

    def found() -> bool:
        return marker.is_file() and marker.read_text() == " ".join(PACKAGES)

    if found():
        return modules
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # two test workers: one npm at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found():
            return modules
        done = subprocess.run(
            ["npm", "install", "--prefix", str(CACHE), "--no-audit", "--no-fund", "--no-save",
             *PACKAGES],
            capture_output=True, text=True, timeout=NPM_TIMEOUT,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"npm could not install {PACKAGES}: {done.stderr[-2000:]}")
        marker.write_text(" ".join(PACKAGES))
    return modules


def _logged(log: Path, name: str) -> Callable[[], str]:
    def tool() -> str:
        with log.open("a") as out:
            out.write(json.dumps({"tool": name, "server": "starlette"}) + "\n")
        return f"{name} done"

    return tool


def mounted_app(log: Path) -> Starlette:
    """The Python SDK's session manager mounted at /mcp, as FastAPI and Starlette apps do."""
    server = MCPServer("egress-e2e-mounted")
    for name in ("search_repositories", "delete_repo"):
        server.add_tool(_logged(log, name), name=name)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server.streamable_http_app(  # makes the session manager the mount serves
        stateless_http=True, json_response=True, transport_security=security
    )
    manager = server.session_manager

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--listen", "--cert", "--key", "--log", "--ready"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    config = uvicorn.Config(
        mounted_app(Path(args.log)), host=host, port=int(port), ssl_certfile=args.cert,
        ssl_keyfile=args.key, log_level="warning",
    )  # fmt: skip
    asyncio.run(_serve(uvicorn.Server(config), Path(args.ready)))


async def _serve(server: uvicorn.Server, ready: Path) -> None:
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.05)
    if server.started:
        ready.write_text("ready\n")
    await task


if __name__ == "__main__":
    main()
