"""`filter_tools_list` (docs/configuration.md#mcp-servers): the `result.tools` of an answer
to a `tools/list` request lists only the tools the entry allows.

`ToolsFilter` rewrites one JSON-RPC document (a message or a batch): each response whose
`result.tools` is a list keeps only the items whose `name` the policy allows, whatever its
`id` (the SDK clients coerce ids: `"2"` and `2.0` answer request 2, D422). `answer_label`
says how a client may read an answer by its Content-Type (D420, D421). The JSON body
transform (`json_transform`) collects the answer, bounded, and rewrites it at its end;
server-sent events go through `proxy.mcp.sse`, one event at a time.

Invariant: an answer this filter cannot read (not UTF-8, not JSON, an object with a key
twice, over the bound) is never forwarded unfiltered: `Unreadable` is raised and the
adapter ends the answer (D215).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.mcp.message import Body
from sandbox_egress.proxy.mcp.policy import McpPolicy


class Unreadable(ValueError):
    """An answer that must be filtered and cannot be read: end it, never forward it."""


@dataclass(frozen=True, slots=True)
class ToolsFilter:
    policies: tuple[McpPolicy, ...]  # those filtering (a sandbox's and its node's)
    # The ids of the tools/list requests of the POST (its answer is held and parsed whole;
    # they name the error that replaces it); None: a stream, parsed event by event (D334).
    # Either way every response whose `result.tools` is a list is filtered (D422).
    ids: frozenset[str | int] | None

    def rewrite(self, text: str) -> str | None:
        """`text` (one JSON document) with the tools lists filtered; None: unchanged.
        On a stream, text that spells no `tools` key (neither the word nor a `\\u`
        escape) holds no tools list and is not parsed (an empty priming event, a
        notification)."""
        if self.ids is None and "tools" not in text and "\\u" not in text:
            return None
        try:
            document = json.loads(text, object_pairs_hook=_unique)
        except (ValueError, RecursionError) as exc:  # a key twice too (D423)
            raise Unreadable("the answer is not JSON, or has a key twice") from exc
        items = document if isinstance(document, list) else [document]
        changed = False
        for item in items:
            changed = self._filter(item) or changed
        return json.dumps(document, ensure_ascii=False) if changed else None

    def _filter(self, message: Any) -> bool:
        if not isinstance(message, dict):
            return False  # every response listing tools, whatever its id: clients coerce ids (D422)
        result = message.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list) or not isinstance(result, dict):
            return False
        kept = [t for t in tools if isinstance(t, dict) and self._allowed(t.get("name"))]
        result["tools"] = kept
        return True

    def _allowed(self, name: Any) -> bool:
        return isinstance(name, str) and all(p.tool_allowed(name) for p in self.policies)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("an object has a key twice")  # parsers disagree on the copy kept
    return found


def tools_filter(policies: tuple[McpPolicy, ...], body: Body) -> ToolsFilter | None:
    """The filter for the answer to `body` (an admitted POST): None unless it holds a
    `tools/list` request and some policy filters with a tools list."""
    filtering = tuple(p for p in policies if p.filter_tools_list and p.tools is not None)
    ids = frozenset(m.id for m in body.messages if m.method == "tools/list" and m.id is not None)
    return ToolsFilter(filtering, ids) if filtering and ids else None


# `streams_filter`'s answers by policies (at most this many; then it starts again): they
# change only with the configuration, and every request on an MCP entry asks.
STREAMS_KEPT = 64
_STREAMS: dict[tuple[McpPolicy, ...], ToolsFilter | None] = {}


def streams_filter(policies: tuple[McpPolicy, ...]) -> ToolsFilter | None:
    """The filter for every event stream an MCP entry answers (a POST's, the GET stream,
    a replay after `Last-Event-ID`): each response listing tools, whatever its id.

    Made once per policies: a policy hashes by identity, and a frozen policy and a
    `ToolsFilter` never change, so the one kept is the one that would be made."""
    try:
        return _STREAMS[policies]
    except KeyError:
        pass
    filtering = tuple(p for p in policies if p.filter_tools_list and p.tools is not None)
    made = ToolsFilter(filtering, None) if filtering else None
    if len(_STREAMS) >= STREAMS_KEPT:
        _STREAMS.clear()  # a reload's policies replace the old ones; bounded either way
    _STREAMS[policies] = made
    return made


JSON_LABEL, SSE_LABEL, OTHER_LABEL, AMBIGUOUS_LABEL = "json", "sse", "other", "ambiguous"


def answer_label(fields: list[str]) -> str:
    """How an MCP client may read an answer by its Content-Type fields (D420): `json` and
    `sse` for exactly one field of that media type; `ambiguous` (refused) for a charset
    other than UTF-8 (D421) or for anything else that names JSON (several fields, a list
    in one: a client reading by prefix takes it as JSON, another as events); `other` (no
    field, another type) is read as events."""
    if any(_foreign_charset(field) for field in fields):
        return AMBIGUOUS_LABEL  # decoded by a client as the filter never reads it
    kinds = [field.split(";")[0].strip().lower() for field in fields]
    if kinds == ["application/json"]:
        return JSON_LABEL
    if kinds == ["text/event-stream"]:
        return SSE_LABEL
    return AMBIGUOUS_LABEL if any("json" in field.lower() for field in fields) else OTHER_LABEL


def _foreign_charset(field: str) -> bool:
    """Whether a Content-Type field names a charset other than UTF-8 (httpx decodes an
    event stream by it: UTF-16 or EBCDIC text the filter reads as bytes hides a list)."""
    for parameter in field.split(";")[1:]:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').strip().lower()
        if name.strip().lower().startswith("charset") and charset not in ("utf-8", "utf8"):
            return True  # `charset*=` (RFC 2231) too, which Python's email parser reads
    return False


def json_transform(tools: ToolsFilter, limit: int) -> Callable[[bytes], bytes]:
    """A response stream function for a JSON answer: hold it (at most `limit` bytes),
    forward it rewritten once the last chunk (b"") arrives."""
    held = bytearray()

    def transform(chunk: bytes) -> bytes:
        if chunk:
            held.extend(chunk)
            if len(held) > limit:
                raise Unreadable("the tools/list answer is larger than mcp.max_body")
            return b""
        if not held:
            return b""
        try:
            text = held.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Unreadable("the answer is not UTF-8") from exc
        rewritten = tools.rewrite(text)
        return bytes(held) if rewritten is None else rewritten.encode()

    return transform


def unreadable_answer(tools: ToolsFilter, sse: bool) -> bytes:
    """What replaces an answer the filter could not read: a JSON-RPC error for the
    tools/list request (an SSE event on a stream), after which nothing more is forwarded."""
    ident = min(tools.ids, key=str) if tools.ids else None  # a stream's: null
    message = "egress_denied: mcp_bad_request: the tools/list answer could not be filtered"
    error = {"code": -31403, "message": message, "data": {"reason": "mcp_bad_request"}}
    text = json.dumps({"jsonrpc": "2.0", "id": ident, "error": error})
    return f"event: message\ndata: {text}\n\n".encode() if sse else text.encode()
