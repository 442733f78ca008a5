"""Reading an MCP POST body strictly: one JSON-RPC 2.0 message or a batch, or why not.

`read_body` is the only parser of what the sandbox sends an MCP endpoint. Anything an
upstream's parser could read differently from this one is refused (`mcp_bad_request`),
never judged loosely:

* the media type is `application/json`, with at most a `charset=utf-8` parameter (D211);
* the bytes are UTF-8 (no byte-order mark), at most the entry's `max_body`;
* no object at any depth has a key twice (parsers disagree on which copy wins), no
  `NaN`/`Infinity`, no number Python cannot hold, no nesting deeper than `MAX_DEPTH`;
* each message is a JSON-RPC 2.0 request, notification or response: `"jsonrpc": "2.0"`,
  a string `method` with object `params` (if any), an `id` that is a string or an
  integer; a response has an `id` and exactly one of `result` / `error`. A batch is a
  non-empty array of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 64  # objects and arrays nested in one message (a deeper one is refused)


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message of a body; `method` is None for a response (the client
    answering a request the server sent it)."""

    method: str | None
    params: dict[str, Any]
    id: str | int | None  # None: a notification
    has_id: bool


@dataclass(frozen=True, slots=True)
class Body:
    messages: tuple[Message, ...]
    batch: bool


class _Refused(ValueError):
    pass


def media_type_problem(values: list[str]) -> str | None:
    """Why the request's Content-Type fields are not `application/json`, or None."""
    if len(values) != 1:
        return "one Content-Type: application/json is required"
    kind, _, rest = values[0].partition(";")
    if kind.strip().lower() != "application/json":
        return "the Content-Type is not application/json"
    for parameter in rest.split(";") if rest.strip() else ():
        name, _, value = parameter.strip().partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() != "utf-8":
            return "a Content-Type parameter other than charset=utf-8"
    return None


def read_body(content_type: list[str], body: bytes, max_body: int) -> Body | str:
    """The messages of one POST body, or why it is `mcp_bad_request`."""
    problem = media_type_problem(content_type)
    if problem is not None:
        return problem
    if len(body) > max_body:
        return "the body is larger than the entry's mcp.max_body"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    try:
        document = json.loads(text, object_pairs_hook=_unique, parse_constant=_constant)
    except _Refused as exc:
        return str(exc)
    except (ValueError, RecursionError):
        return "the body is not one JSON document"
    if _depth(document) > MAX_DEPTH:
        return f"the body nests deeper than {MAX_DEPTH}"
    if isinstance(document, list):
        if not document:
            return "an empty batch"
        messages = [_message(item) for item in document]
        bad = next((m for m in messages if isinstance(m, str)), None)
        return bad if bad is not None else Body(tuple(messages), True)  # type: ignore[arg-type]
    message = _message(document)
    return message if isinstance(message, str) else Body((message,), False)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _Refused("an object has a key twice")
    return found


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON")


def _depth(value: Any) -> int:
    """How deeply `value` nests, iteratively (the parser already bounded the recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in item)
    return deepest


def _message(raw: Any) -> Message | str:
    if not isinstance(raw, dict):
        return "a message is not a JSON object"
    if raw.get("jsonrpc") != "2.0":
        return 'a message without "jsonrpc": "2.0"'
    has_id = "id" in raw
    ident = raw.get("id")
    if has_id and (isinstance(ident, bool) or not isinstance(ident, str | int)):
        return "a message id is not a string or an integer"
    if "method" not in raw:
        if not has_id or ("result" in raw) == ("error" in raw) or "params" in raw:
            return "a message is neither a request, a notification nor a response"
        return Message(None, {}, ident, True)
    method, params = raw["method"], raw.get("params", {})
    if not isinstance(method, str) or "result" in raw or "error" in raw:
        return "a request's method is not a string"
    if not isinstance(params, dict):
        return "a request's params is not an object"
    return Message(method, params, ident, has_id)
