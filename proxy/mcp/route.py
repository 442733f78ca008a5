"""Which requests on an entry with `mcp:` are judged as MCP, and how
(docs/configuration.md#mcp-servers, D330-D333).

Servers route more than one spelling of a path to their MCP handler: Express ignores case
and a trailing slash, a Starlette `Mount` serves everything below its prefix, and a
server behind a normalising front decodes percent-escapes and resolves dot segments. So
`on_endpoint` compares a path in a deliberately loose form (`loose_path`): every escape
decoded (twice), `;params` dropped from each segment, backslashes read as slashes, empty
and `.` segments dropped, `..` resolved, the whole case-folded, trailing slashes ignored.
A path is on an endpoint when that form is the endpoint's or lies below it.

`mcp_route` sorts one request of such an entry:

* `Route.POST` — a request with a body on an endpoint: held and judged strictly (1.14);
* `Route.SNIFF` — a body elsewhere: held, and judged as MCP when `maybe_jsonrpc` says it
  could be JSON-RPC (D331);
* `Route.WEBSOCKET` — an upgrade every policy allows (`mcp.websocket: true`): each message
  judged (D332); `Route.REFUSED` — an upgrade some policy does not allow;
* `Route.ANSWER` — nothing to judge on the way out: the answer's event streams are
  filtered (D334).

Invariant: loosening only ever adds paths to an endpoint (over-matching refuses a
non-MCP body on a spelling of the endpoint; it never lets an MCP body pass unjudged).
"""

from __future__ import annotations

import json
from enum import Enum
from urllib.parse import unquote

from sandbox_egress.proxy.mcp.policy import McpPolicy

_BOMS = (b"\xef\xbb\xbf", b"\xfe\xff", b"\xff\xfe")
_SPACE = b" \t\r\n\x00"


class Route(Enum):
    POST = "post"
    SNIFF = "sniff"
    WEBSOCKET = "websocket"
    REFUSED = "refused"
    ANSWER = "answer"


def loose_path(path: str) -> str:
    """`path` (without its query) in the form endpoints are compared in."""
    decoded = unquote(unquote(path, errors="replace"), errors="replace").replace("\\", "/")
    kept: list[str] = []
    for segment in decoded.split("/"):
        segment = segment.split(";", 1)[0]
        if segment in ("", "."):
            continue
        if segment == "..":
            if kept:
                kept.pop()
            continue
        kept.append(segment)
    return "/" + "/".join(kept).casefold()


def on_endpoint(policy: McpPolicy, path: str) -> bool:
    """Whether `path` is one of the policy's endpoints, by any spelling, or below one."""
    loose = loose_path(path)
    for endpoint in policy.endpoints:
        wanted = loose_path(endpoint)
        if loose == wanted or loose.startswith(wanted.rstrip("/") + "/"):
            return True
    return False


def mcp_route(policies: tuple[McpPolicy, ...], path: str, *, body: bool, websocket: bool) -> Route:
    """How a request on an MCP entry is judged; `path` without the query."""
    if websocket:
        return Route.WEBSOCKET if all(p.websocket for p in policies) else Route.REFUSED
    if not body:
        return Route.ANSWER
    return Route.POST if any(on_endpoint(p, path) for p in policies) else Route.SNIFF


def maybe_jsonrpc(raw: bytes) -> bool:
    """Whether a body sent to another path of an MCP entry is judged as MCP: it begins
    like JSON (after byte-order marks, whitespace and NUL bytes) and is not plainly a
    JSON document without a JSON-RPC message. What does not parse is judged (and
    refused), what parses is judged when an object of it, or of its top-level array,
    has a `jsonrpc` or a `method` key."""
    start = raw.lstrip(_SPACE)
    while start.startswith(_BOMS):
        start = start[3 if start.startswith(_BOMS[0]) else 2 :].lstrip(_SPACE)
    if not start.startswith((b"{", b"[")):
        return False
    try:
        document = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return True
    items = document if isinstance(document, list) else [document]
    return any(isinstance(i, dict) and ("jsonrpc" in i or "method" in i) for i in items)
