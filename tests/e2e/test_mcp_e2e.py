"""End to end, MCP servers judged per message (docs/configuration.md#mcp-servers).

The official `mcp` SDK on both sides: its server (testbed/mcp_server.py) over streamable
HTTP behind TLS (the test CA) in the upstream namespace, answering as JSON on :9446 and as
server-sent events on :9447, with a call log; its client here (the sandbox's side, which
reaches nothing but the proxy) through a proxy of the test's own. Raw clients send what
no SDK sends (the malformed cases) to the echo upstream, whose log shows every request
that reached it. The method bullet of docs/configuration.md#rules (`get`, method-override fields) is checked
against the same echo upstream.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from testbed.expect import Observed, assert_refused
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, _start_and_wait

pytestmark = pytest.mark.netns

JSON_PORT, SSE_PORT = 9446, 9447
CONFIG = """\
network:
  allowlist:
    - domain: other.allowed.test          # the SDK's server
      ports: [9446, 9447]
      mcp:
        endpoint: ["/mcp"]
        tools:
          - name: search_repositories
          - name: slow_steps
          - name: create_issue
            arguments:
              owner: {equals: acme}
              repo: {in: [web, api]}
              title: {matches: "[^\\\\n]{1,200}"}
        filter_tools_list: true
    - domain: x.wild.test                 # the echo upstream, for raw clients
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        max_body: 4KiB
    - domain: api.allowed.test            # the method judged is the method sent
      rules:
        - methods: [GET, HEAD]
        - methods: [POST]
          paths: ["/repos/acme/*/issues"]
    - domain: 198.18.1.0/24               # the upstreams' range (internal: opened explicitly)
"""


@dataclass(frozen=True)
class McpUpstream:
    calls: JsonLines
    release: Path


@pytest.fixture(scope="module")
def mcp_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[McpUpstream]:
    log, ready, release = e2e_dir / "mcp-calls.jsonl", e2e_dir / "mcp.ready", e2e_dir / "release"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.mcp_server",
        "--json", f"{UPSTREAM_IP}:{JSON_PORT}", "--sse", f"{UPSTREAM_IP}:{SSE_PORT}",
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--log", str(log), "--release", str(release), "--ready", str(ready),
    ]  # fmt: skip
    child = _start_and_wait("mcp-upstream", argv, e2e_dir, ready)
    try:
        yield McpUpstream(JsonLines(log), release)
    finally:
        child.stop()


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy]) -> PrivateProxy:
    return private_proxy("mcp", CONFIG)


async def _session_run(view: Harness, port: int, script: Callable[[ClientSession], Any]) -> Any:
    tls = ssl.create_default_context(cafile=str(view.proxy_ca))
    proxy_url = f"http://{view.proxy_host}:{view.proxy_port}"
    url = f"https://other.allowed.test:{port}/mcp"
    http = httpx2.AsyncClient(verify=tls, proxy=proxy_url, trust_env=False, timeout=60)
    async with (
        http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        return await script(session)


def with_session(view: Harness, port: int, script: Callable[[ClientSession], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(_session_run(view, port, script), 120))


async def _refusal(call: Any) -> str:
    try:
        await call
    except MCPError as error:
        return str(error.error.message)
    return "not refused"


@pytest.mark.parametrize("port", [JSON_PORT, SSE_PORT], ids=["json", "sse"])
def test_the_sdk_client_sees_allowed_tools_and_refusals(
    proxy: PrivateProxy, mcp_upstream: McpUpstream, port: int
) -> None:
    calls, audit = mcp_upstream.calls.mark(), proxy.view.audit_log.mark()

    async def script(session: ClientSession) -> dict[str, Any]:
        listed = await session.list_tools()
        created = await session.call_tool(
            "create_issue", {"owner": "acme", "repo": "web", "title": "A bug"}
        )
        denied_tool = await _refusal(
            session.call_tool("delete_repo", {"owner": "acme", "repo": "web"})
        )
        denied_argument = await _refusal(
            session.call_tool("create_issue", {"owner": "evil-org", "repo": "web", "title": "x"})
        )
        return {
            "tools": sorted(t.name for t in listed.tools),
            "created": created.content[0].text,
            "tool": denied_tool,
            "argument": denied_argument,
        }

    seen = with_session(proxy.view, port, script)
    assert seen["tools"] == ["create_issue", "search_repositories", "slow_steps"]
    assert seen["created"] == "created in acme/web: A bug"
    assert seen["tool"].startswith("egress_denied: mcp_tool_denied: "), seen
    assert seen["argument"].startswith("egress_denied: mcp_argument_denied: "), seen
    assert [c["tool"] for c in mcp_upstream.calls.since(calls)] == ["create_issue"]
    proxy.view.audit_log.wait_for(audit, lambda a: a["reason"] == "mcp_argument_denied")
    lines = proxy.view.audit_log.since(audit)
    refused = [a for a in lines if a["reason"] in ("mcp_tool_denied", "mcp_argument_denied")]
    assert [(a["status"], a["mcp"]["tools"]) for a in refused] == [
        (403, ["delete_repo"]),
        (403, ["create_issue"]),
    ]
    assert refused[1]["mcp"]["arguments"] == ["owner", "repo", "title"]
    assert "evil-org" not in json.dumps(lines)  # argument values never reach the audit line
    metrics = proxy.view.metrics_text()
    assert 'egress_mcp_messages_total{method="tools/call",reason="mcp_tool_denied"}' in metrics
    assert "delete_repo" not in metrics


def test_a_progress_stream_arrives_event_by_event(
    proxy: PrivateProxy, mcp_upstream: McpUpstream
) -> None:
    calls = mcp_upstream.calls.mark()
    mcp_upstream.release.unlink(missing_ok=True)
    seen: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message)
        mcp_upstream.release.touch()  # the server sends its last event only after this

    async def script(session: ClientSession) -> str:
        result = await session.call_tool("slow_steps", {}, progress_callback=progress)
        return str(result.content[0].text)

    assert with_session(proxy.view, SSE_PORT, script) == "done"
    assert seen == ["first", "last"]
    phases = [c for c in mcp_upstream.calls.since(calls) if c["tool"] == "slow_steps"]
    # The client saw "first" before the server sent "last": streamed, not buffered.
    assert phases[-1] == {"tool": "slow_steps", "phase": "last", "released": True}


def post(view: Harness, body: bytes, headers: list[tuple[str, str]] | None = None) -> Any:
    fields = headers if headers is not None else [("Content-Type", "application/json")]
    with view.tunnel("x.wild.test:443") as conn:
        return conn.request("POST", "/mcp", [("Host", "x.wild.test"), *fields], body)


MESSAGE = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_repositories","arguments":{"q":"x"}}}'
MALFORMED = [
    ("text-plain", MESSAGE, [("Content-Type", "text/plain")]),
    ("form", MESSAGE, [("Content-Type", "application/x-www-form-urlencoded")]),
    ("duplicate-key", MESSAGE.replace(b'"q":"x"', b'"q":"x","q":"y"'), None),
    ("duplicate-name", MESSAGE.replace(b'"search_repositories"', b'"search_repositories","name":"delete_repo"'), None),
    ("bad-utf8", MESSAGE.replace(b'"x"', b'"\xc3\x28"'), None),
    ("oversize", MESSAGE.replace(b'"x"', b'"' + b"x" * 5000 + b'"'), None),
    ("gzip", MESSAGE, [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]),
    ("lying-method-header", MESSAGE, [("Content-Type", "application/json"), ("Mcp-Method", "ping")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "headers"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_a_malformed_post_never_reaches_the_server(
    proxy: PrivateProxy, obs: Observed, body: bytes, headers: list[tuple[str, str]] | None
) -> None:
    response = post(proxy.view, body, headers)
    assert (response.status, response.header_all("X-Egress-Denied")) == (400, ["mcp_bad_request"])
    answer = response.json()
    assert answer["error"]["code"] == -31403
    assert answer["error"]["message"].startswith("egress_denied: mcp_bad_request: ")
    obs.assert_nothing_reached()


def test_an_allowed_post_reaches_the_server_byte_for_byte(
    proxy: PrivateProxy, obs: Observed
) -> None:
    response = post(proxy.view, MESSAGE)
    assert response.status == 200
    request = obs.only_request()
    assert (request["method"], request["target"], request["body_len"]) == (
        "POST",
        "/mcp",
        len(MESSAGE),
    )


def test_a_refused_tool_never_reaches_the_server(proxy: PrivateProxy, obs: Observed) -> None:
    response = post(proxy.view, MESSAGE.replace(b"search_repositories", b"delete_repo"))
    assert (response.status, response.header_all("X-Egress-Denied")) == (403, ["mcp_tool_denied"])
    assert response.json()["id"] == 7
    obs.assert_nothing_reached()


@pytest.mark.parametrize("length", [len(MESSAGE) + 50, len(MESSAGE) * 2], ids=["short", "double"])
def test_a_body_that_never_finishes_never_reaches_the_server(
    proxy: PrivateProxy, obs: Observed, length: int
) -> None:
    with proxy.view.tunnel("x.wild.test:443") as conn:
        head = (
            "POST /mcp HTTP/1.1\r\nHost: x.wild.test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n"
        )
        conn.send(head.encode() + MESSAGE)  # fewer bytes than announced, then silence
        conn.sock.settimeout(3)
        with pytest.raises((socket.timeout, TimeoutError)):
            conn.read_response("POST")
    obs.assert_nothing_reached()


def test_an_unannounced_body_is_refused(proxy: PrivateProxy, obs: Observed) -> None:
    """A chunked body cannot be bounded before it is read (D212): refused unread, answered
    at once and the body dropped (lingering close, D350), nothing sent."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(MESSAGE), MESSAGE)
    with proxy.view.tunnel("x.wild.test:443") as conn:
        head = (
            "POST /mcp HTTP/1.1\r\nHost: x.wild.test\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        conn.send(head.encode() + chunked)
        response = conn.read_response("POST")
    assert response.status == 400, response.describe()
    assert response.header_all("X-Egress-Denied") == ["mcp_bad_request"]
    assert json.loads(response.body)["error"]["data"]["reason"] == "mcp_bad_request"
    obs.assert_nothing_reached()
    audit = proxy.view.audit_log
    assert audit.wait_for(0, lambda a: a["reason"] == "mcp_bad_request")["method"] == "POST"


def test_the_method_judged_is_the_method_sent(proxy: PrivateProxy, obs: Observed) -> None:
    view = proxy.view
    assert_refused(
        view.https("api.allowed.test:443", "/repos/acme/web", method="get"), "rule_mismatch"
    )
    overridden = view.https(
        "api.allowed.test:443",
        "/repos/acme/web/issues",
        [("X-HTTP-Method-Override", "DELETE")],
        method="POST",
        body=b"{}",
    )
    assert_refused(overridden, "rule_mismatch")
    obs.assert_nothing_reached()
    allowed = view.https("api.allowed.test:443", "/repos/acme/web", method="GET")
    assert allowed.status == 200
    assert obs.only_request()["method"] == "GET"


def test_the_sdk_client_sees_why_a_call_over_max_body_is_refused(
    proxy: PrivateProxy, mcp_upstream: McpUpstream
) -> None:
    """A `tools/call` whose body is over `max_body` (and over 64 KiB, so refused before
    its body is read): the SDK reads the 400 and its JSON-RPC error (lingering close,
    D350); failed before with a closed connection."""
    calls = mcp_upstream.calls.mark()

    async def script(session: ClientSession) -> str:
        big = {"q": "q" * (2 * 1024 * 1024)}
        return await _refusal(session.call_tool("search_repositories", big))

    seen = with_session(proxy.view, JSON_PORT, script)
    assert "mcp_bad_request" in seen, seen
    assert mcp_upstream.calls.since(calls) == []
    line = proxy.view.audit_log.wait_for(0, lambda a: a["reason"] == "mcp_bad_request")
    assert (line["decision"], line["status"]) == ("deny", 400)
