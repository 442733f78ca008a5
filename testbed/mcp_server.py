"""An MCP server built with the official SDK (`mcp`), over streamable HTTP behind TLS, for
the MCP end-to-end tests (tests/e2e/test_mcp_e2e.py).

One process serves the same tools twice: `--json HOST:PORT` answers POSTs as JSON
(`json_response=True`), `--sse HOST:PORT` as server-sent events. Every tool call is
appended to `--log` (tool and arguments) before it does anything, so a test can prove a
refused call never reached the server. `slow_steps` sends one progress notification, then
waits (bounded) until the file `--release` exists — the client creates it when it has
seen that first event — and only then sends the last one: the log line says whether it
was released, so a proxy that held the stream to its end would show `released: false`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings

RELEASE_WAIT_S = 30.0


def build(log: Path, release: Path) -> MCPServer:
    server = MCPServer("egress-e2e")

    def record(tool: str, **fields: object) -> None:
        with log.open("a") as out:
            out.write(json.dumps({"tool": tool, **fields}) + "\n")

    @server.tool()
    def search_repositories(query: str) -> str:
        record("search_repositories", arguments={"query": query})
        return f"found: {query}"

    @server.tool()
    def create_issue(owner: str, repo: str, title: str) -> str:
        record("create_issue", arguments={"owner": owner, "repo": repo, "title": title})
        return f"created in {owner}/{repo}: {title}"

    @server.tool()
    def delete_repo(owner: str, repo: str) -> str:
        record("delete_repo", arguments={"owner": owner, "repo": repo})
        return "deleted"

    @server.tool()
    async def slow_steps(ctx: Context) -> str:
        record("slow_steps", phase="start")
        await ctx.report_progress(1, 2, "first")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RELEASE_WAIT_S
        while not release.exists() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        record("slow_steps", phase="last", released=release.exists())
        await ctx.report_progress(2, 2, "last")
        return "done"

    return server


def _uvicorn(
    server: MCPServer, listen: str, json_response: bool, cert: str, key: str
) -> uvicorn.Server:
    host, _, port = listen.rpartition(":")
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(json_response=json_response, transport_security=security)
    config = uvicorn.Config(
        app, host=host, port=int(port), ssl_certfile=cert, ssl_keyfile=key, log_level="warning"
    )
    return uvicorn.Server(config)


async def serve(args: argparse.Namespace) -> None:
    log, release = Path(args.log), Path(args.release)
    servers = [
        _uvicorn(build(log, release), args.json, True, args.cert, args.key),
        _uvicorn(build(log, release), args.sse, False, args.cert, args.key),
    ]
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    while not all(s.started for s in servers):
        if any(t.done() for t in tasks):
            await asyncio.gather(*tasks)  # raises what stopped a server
            return
        await asyncio.sleep(0.05)
    Path(args.ready).write_text("ready\n")
    await asyncio.gather(*tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--json", "--sse", "--cert", "--key", "--log", "--release", "--ready"):
        parser.add_argument(name, required=True)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
