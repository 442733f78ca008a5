"""End to end, an independent attack on the MCP gate (issue 43's surface): answers a
misbehaving MCP server labels so that the gate's `filter_tools_list` would not read them
as an event stream, while an MCP client does (the TypeScript SDK reads a GET stream
whatever its Content-Type; the Python SDK takes a POST answer whose Content-Type begins
with `text/event-stream`, also when the field is sent twice).

The upstream is testbed/hostile_server.py (`/mcp-stream?type=N`): one server-sent event
carrying a `tools/list` result with an allowed and a refused tool, under the Content-Type
fields of `MCP_STREAM_TYPES[N]` and in its charset (httpx decodes an event stream by it). Whatever the label, the refused tool never reaches the
sandbox (D420).

A request target with a fragment (`/mcp#x`, which Node's and httptools' parsers route to
`/mcp`) would be another path to the gate; it never gets that far (the request head check
refuses it), so a body the gate could neither hold nor read as JSON cannot use it.

`SPELLINGS`: request-side attacks (methods, path spellings, JSON encodings, framing,
pipelining, upgrades) that each carry a refused call; none reaches the echo upstream.
"""

from __future__ import annotations

import contextlib
import hashlib
import ssl
from pathlib import Path

import pytest

from testbed.expect import Observed
from testbed.hostile_server import MCP_STREAM_TYPES
from testbed.rawhttp import Conn, Response
from tests.e2e.conftest import HOSTILE_PORT, Hostile, PrivateProxy
from tests.e2e.memory_support import (  # noqa: F401 - fixtures
    plain,
)

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

HOST = f"other.allowed.test:{HOSTILE_PORT}"
CONFIG = f"""\
network:
  allowlist:
    - domain: other.allowed.test
      ports: [{HOSTILE_PORT}]
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
        filter_tools_list: true
    - domain: x.wild.test                 # the echo upstream: it shows what reached it
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
    - domain: 198.18.1.0/24
"""
TOOLS_LIST = b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'


@pytest.fixture(scope="module")
def shared_proxy(module_private_proxy) -> PrivateProxy:  # type: ignore[no-untyped-def]
    return module_private_proxy("mcp-attack", CONFIG)


@pytest.fixture(name="proxy")
def proxy_fixture(shared_proxy: PrivateProxy) -> PrivateProxy:
    """The module's proxy (issue 49, D641: a start per test was most of the module's time),
    once no connection of an earlier test is open in it. The gate keeps no state between
    connections that these tests read: each reads only its own audit lines and traffic."""
    shared_proxy.wait_idle()
    return shared_proxy


def exchange(p: PrivateProxy, head: bytes, method: str) -> Response:
    """The answer to one request on a connection of its own."""
    with Conn.over(plain(p)) as conn:
        conn.send(head)
        return conn.read_response(method)


def request(method: str, path: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} http://{HOST}{path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n"
        "Accept: application/json, text/event-stream\r\n"
    )
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


@pytest.mark.parametrize("variant", range(len(MCP_STREAM_TYPES)))
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_refused_tool_never_reaches_the_sandbox_whatever_the_stream_is_labelled(
    proxy: PrivateProxy, hostile: Hostile, method: str, variant: int
) -> None:
    mark = hostile.log.mark()
    body = TOOLS_LIST if method == "POST" else b""
    answer = exchange(proxy, request(method, f"/mcp?type={variant}", body), method)
    served = hostile.log.wait_for(mark, lambda e: e.get("path") == "/mcp", timeout=15)
    assert served["ended_by"] == "size"  # the server did send its unfiltered list
    assert answer.status == 200, answer.describe()
    encoding = MCP_STREAM_TYPES[variant][1]
    assert "delete_repo" not in answer.body.decode(encoding, errors="replace"), answer.describe()
    assert b"delete_repo" not in answer.body, answer.describe()


REFUSED_CALL = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_repo","arguments":{}}}'
)


@pytest.mark.parametrize("target", ["/mcp#x", "/mcp#", "/mcp/#/../x"])
def test_a_fragment_does_not_move_a_post_off_the_endpoint(
    proxy: PrivateProxy, obs: Observed, target: str
) -> None:
    """A chunked text/plain body to `/mcp#x` is refused unread, never relayed."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(REFUSED_CALL), REFUSED_CALL)
    mark = proxy.view.audit_log.mark()
    with proxy.view.tunnel("x.wild.test:443") as conn:
        head = (
            f"POST {target} HTTP/1.1\r\nHost: x.wild.test\r\nContent-Type: text/plain\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        conn.send(head.encode() + chunked)
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
            conn.read_response("POST")
    obs.assert_nothing_reached()
    audit = proxy.view.audit_log.wait_for(mark, lambda a: a.get("method") == "POST")
    assert (audit["decision"], audit["reason"]) == ("deny", "bad_request")


def _call(name: str = "delete_repo", method: str = "tools/call") -> bytes:
    return b'{"jsonrpc":"2.0","id":7,"method":"%s","params":{"name":"%s","arguments":{}}}' % (
        method.encode(),
        name.encode(),
    )


ALLOWED = _call("search_repositories")


def _post(target: str, body: bytes, *fields: str, method: str = "POST") -> bytes:
    head = f"{method} {target} HTTP/1.1\r\nHost: x.wild.test\r\n" + "".join(
        f"{f}\r\n" for f in fields
    )
    if not any(f.lower().startswith(("content-length", "transfer-encoding")) for f in fields):
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


JSON_TYPE = "Content-Type: application/json"
SPELLINGS = [
    # (id, the bytes sent): each carries a refused call; none may reach the server
    ("put", _post("/mcp", REFUSED_CALL, JSON_TYPE, method="PUT")),
    ("patch-case-slash", _post("/MCP/", REFUSED_CALL, JSON_TYPE, method="PATCH")),
    ("get-with-body", _post("/mcp", REFUSED_CALL, JSON_TYPE, method="GET")),
    ("query", _post("/mcp?x=1", REFUSED_CALL, JSON_TYPE)),
    ("params-segment", _post("/mcp;v=1/", REFUSED_CALL, JSON_TYPE)),
    ("dot-segments", _post("/a/./../mcp/.", REFUSED_CALL, JSON_TYPE)),
    ("encoded-dots", _post("/a/%2e%2e/mcp", REFUSED_CALL, JSON_TYPE)),
    ("encoded-slash", _post("/mcp%2Fx", REFUSED_CALL, JSON_TYPE)),
    ("double-encoded", _post("/%256Dcp", REFUSED_CALL, JSON_TYPE)),
    ("backslash", _post("/x\\..\\mcp", REFUSED_CALL, JSON_TYPE)),
    ("nul", _post("/mcp%00", REFUSED_CALL, JSON_TYPE)),
    ("absolute-form", _post("https://x.wild.test/mcp", REFUSED_CALL, JSON_TYPE)),
    ("escaped-method", _post("/mcp", _call(method="tools\\u002fcall"), JSON_TYPE)),
    ("escaped-name", _post("/mcp", _call("delete\\u005frepo"), JSON_TYPE)),
    ("batch", _post("/mcp", b"[" + ALLOWED + b"," + REFUSED_CALL + b"]", JSON_TYPE)),
    ("dup-name", _post("/mcp", ALLOWED.replace(b'"arguments"', b'"name":"delete_repo","arguments"'), JSON_TYPE)),  # noqa: E501
    ("dup-method-case", _post("/mcp", REFUSED_CALL.replace(b'"method"', b'"Method":"ping","method"'), JSON_TYPE)),  # noqa: E501
    ("bom", _post("/mcp", b"\xef\xbb\xbf" + REFUSED_CALL, JSON_TYPE)),
    ("utf16", _post("/mcp", REFUSED_CALL.decode().encode("utf-16"), JSON_TYPE)),
    ("utf16-other-path", _post("/rpc", REFUSED_CALL.decode().encode("utf-16-le"), JSON_TYPE)),
    ("utf32-other-path", _post("/rpc", REFUSED_CALL.decode().encode("utf-32"), "Content-Type: text/plain")),  # noqa: E501
    ("text-plain-other-path", _post("/rpc", REFUSED_CALL, "Content-Type: text/plain")),
    ("no-type-other-path", _post("/rpc", REFUSED_CALL)),
    ("two-types", _post("/mcp", REFUSED_CALL, JSON_TYPE, JSON_TYPE)),
    ("charset-utf16", _post("/mcp", REFUSED_CALL, "Content-Type: application/json; charset=utf-16")),  # noqa: E501
    ("te-and-cl", _post("/mcp", b"%x\r\n%s\r\n0\r\n\r\n" % (len(REFUSED_CALL), REFUSED_CALL), JSON_TYPE, "Transfer-Encoding: chunked", f"Content-Length: {len(REFUSED_CALL)}")),  # noqa: E501
    ("chunk-ext-other-path", _post("/rpc", b"%x;a=b\r\n%s\r\n0\r\n\r\n" % (len(REFUSED_CALL), REFUSED_CALL), JSON_TYPE, "Transfer-Encoding: chunked")),  # noqa: E501
    ("gzip-other-path", _post("/rpc", REFUSED_CALL, JSON_TYPE, "Content-Encoding: identity")),
    ("expect-100", _post("/mcp", REFUSED_CALL, JSON_TYPE, "Expect: 100-continue")),
    ("http10", _post("/mcp", REFUSED_CALL, JSON_TYPE).replace(b"HTTP/1.1", b"HTTP/1.0", 1)),
    ("trailing-document", _post("/mcp", REFUSED_CALL + b" " + ALLOWED, JSON_TYPE)),
    ("nested-params-name", _post("/mcp", _call().replace(b'"params":{', b'"params":{"params":{"name":"search_repositories"},'), JSON_TYPE)),  # noqa: E501
    ("float-id", _post("/mcp", REFUSED_CALL.replace(b'"id":7', b'"id":7.0'), JSON_TYPE)),
    ("pipelined", _post("/mcp", ALLOWED, JSON_TYPE) + _post("/mcp", REFUSED_CALL, JSON_TYPE)),
    ("empty-lines-first", b"\r\n\r\n" + _post("/mcp", REFUSED_CALL, JSON_TYPE)),
    ("websocket-upgrade", _post("/mcp", b"", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13")),  # noqa: E501
    ("h2c-upgrade", _post("/mcp", REFUSED_CALL, JSON_TYPE, "Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings", "HTTP2-Settings: AAMAAABkAAQAAP__")),  # noqa: E501
]  # fmt: skip


@pytest.mark.parametrize("sent", [s[1] for s in SPELLINGS], ids=[s[0] for s in SPELLINGS])
def test_no_spelling_of_a_refused_call_reaches_the_server(
    proxy: PrivateProxy, obs: Observed, sent: bytes
) -> None:
    two = sent.count(b"HTTP/1.1\r\n") > 1
    with proxy.view.tunnel("x.wild.test:443") as conn:
        conn.send(sent)
        conn.sock.settimeout(5)
        with contextlib.suppress(ConnectionError, ssl.SSLError, OSError, ValueError):
            conn.read_response("POST")
            # A second answer: the second request's, or one to bytes the proxy took for a
            # request (it would reach the server within milliseconds): 1 s is ample.
            conn.sock.settimeout(5 if two else 1)
            conn.read_response("POST")
    reached = [(r["method"], r["body_len"]) for r in obs.requests()]
    assert reached == ([("POST", len(ALLOWED))] if two else [])


def _sigv4_config(key_file: Path, secret_file: Path) -> str:
    return f"""\
credentials:
  aws-mcp: {{aws: {{access_key_id: "${{file:{key_file}}}",
                   secret_access_key: "${{file:{secret_file}}}"}}}}
network:
  allowlist:
    - domain: x.wild.test                 # an MCP server behind SigV4 (an AWS gateway)
      credential: {{name: aws-mcp, as: sigv4, placeholder_access_key_id: {PLACEHOLDER},
                   services: [bedrock-agentcore], regions: [us-east-1]}}
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
    - domain: 198.18.1.0/24
"""


PLACEHOLDER = "AKIAEGRESSPLACEHOLDR"


def _signed(body: bytes) -> list[tuple[str, str]]:
    """What a SigV4 client holding the placeholder sends (its signature is worthless)."""
    scope = "20261204/us-east-1/bedrock-agentcore/aws4_request"
    return [
        ("Host", "x.wild.test"),
        ("Content-Type", "application/json"),
        ("X-Amz-Date", "20261204T000000Z"),
        ("X-Amz-Content-SHA256", hashlib.sha256(body).hexdigest()),
        ("Authorization", f"AWS4-HMAC-SHA256 Credential={PLACEHOLDER}/{scope}, "
                          f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                          f"Signature={'0' * 64}"),
    ]  # fmt: skip


def test_an_mcp_entry_signed_with_sigv4_still_judges_each_call(
    private_proxy, e2e_dir: Path, obs: Observed
) -> None:  # type: ignore[no-untyped-def]
    """SigV4 holds the body to sign it; the MCP gate must judge that same held body (D424)."""
    key_file, secret_file = e2e_dir / "mcp-aws-id", e2e_dir / "mcp-aws-key"
    key_file.write_text("AKIAREALKEYFORMCPXYZ\n")
    secret_file.write_text("realsecretrealsecretrealsecretrealsecret\n")
    view = private_proxy("mcp-sigv4", _sigv4_config(key_file, secret_file)).view
    with view.tunnel("x.wild.test:443") as conn:
        refused = conn.request("POST", "/mcp", _signed(REFUSED_CALL), REFUSED_CALL)
    assert (refused.status, refused.header_all("X-Egress-Denied")) == (403, ["mcp_tool_denied"])
    obs.assert_nothing_reached()
    with view.tunnel("x.wild.test:443") as conn:
        allowed = conn.request("POST", "/mcp", _signed(ALLOWED), ALLOWED)
    assert allowed.status == 200, allowed.describe()
    request = obs.only_request()
    assert (request["target"], request["body_len"]) == ("/mcp", len(ALLOWED))
    assert dict(request["headers"])["Authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIAREALKEYFORMCPXYZ/"
    )  # signed with the real key
