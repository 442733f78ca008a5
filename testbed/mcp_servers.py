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
`--resumable HOST:PORT` serves the same mount with sessions, server-sent events and an
event store (`Replay`): a GET with `Last-Event-ID` replays every event stored after that
one, as a server resuming a stream does.
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
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import JSONRPCMessage
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


class Replay(EventStore):
    """Every event in the order stored; a replay sends each one after the id given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []  # (id, stream, message)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        self.events.append((str(len(self.events) + 1), stream_id, message))
        return self.events[-1][0]

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        after = [e for e in self.events if int(e[0]) > int(last_event_id)]
        for event_id, _stream, message in after:
            if message is not None:
                await send_callback(EventMessage(message, event_id))
        return after[-1][1] if after else None


def mounted_app(log: Path, resumable: bool = False) -> Starlette:
    """The Python SDK's session manager mounted at /mcp, as FastAPI and Starlette apps do."""
    server = MCPServer("egress-e2e-mounted")
    for name in ("search_repositories", "delete_repo"):
        server.add_tool(_logged(log, name), name=name)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    server.streamable_http_app(  # makes the session manager the mount serves
        stateless_http=not resumable,
        json_response=not resumable,
        event_store=Replay() if resumable else None,
        transport_security=security,
    )
    manager = server.session_manager

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--listen", "--resumable", "--cert", "--key", "--log", "--ready"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    servers = []
    for listen, resumable in ((args.listen, False), (args.resumable, True)):
        host, _, port = listen.rpartition(":")
        config = uvicorn.Config(
            mounted_app(Path(args.log), resumable), host=host, port=int(port),
            ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning",
        )  # fmt: skip
        servers.append(uvicorn.Server(config))
    asyncio.run(_serve(servers, Path(args.ready)))


async def _serve(servers: list[uvicorn.Server], ready: Path) -> None:
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    while not all(s.started for s in servers) and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    if all(s.started for s in servers):
        ready.write_text("ready\n")
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    main()
