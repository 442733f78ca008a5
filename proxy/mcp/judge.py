"""Judging an MCP POST (docs/configuration.md#mcp-servers): every message against the
entry's `mcp:` policy, the mirrored headers against the body, and the refusal the
sandbox's MCP client reads.

`judge_post` is the pure stage the adapter (addons/clauses/mcp.py) calls once the held body is
complete. It answers an `McpVerdict`: allowed, or the reason of the first refused
message (a batch with one refused message is refused whole) with a sentence naming what
was refused. `refusal_body` is the JSON-RPC error (code -31403) that makes the official
SDK raise an MCP error carrying the reason.

Invariants:
* The decision comes from the body; `Mcp-Method` / `Mcp-Name` can only refuse (when
  they disagree with it, `mcp_bad_request`), never admit.
* What the verdict names for the audit line are method, tool and argument NAMES, never
  an argument's value; the human sentence names at most a tool and an argument path.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.mcp.message import Body, Message, read_body
from sandbox_egress.proxy.mcp.policy import McpPolicy

ERROR_CODE = -31403  # the JSON-RPC error code of a refusal
MCP_REASONS = frozenset(
    {
        Reason.MCP_BAD_REQUEST,
        Reason.MCP_METHOD_DENIED,
        Reason.MCP_TOOL_DENIED,
        Reason.MCP_ARGUMENT_DENIED,
    }
)
# Methods whose params value the `Mcp-Name` header mirrors (the MCP transport's list).
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
MAX_NAMES = 16  # names kept for the audit line, each at most NAME_LENGTH characters
NAME_LENGTH = 64


@dataclass(frozen=True, slots=True)
class McpVerdict:
    reason: Reason | None  # None: every message admitted
    detail: str = ""  # why, a sentence without argument values
    body: Body | None = None
    methods: tuple[str, ...] = ()  # for the audit line: the body's methods
    tools: tuple[str, ...] = ()  # the tools called
    arguments: tuple[str, ...] = ()  # the argument names passed to them

    @property
    def allowed(self) -> bool:
        return self.reason is None


def judge_post(
    policy: McpPolicy, content_type: list[str], headers: Mapping[str, list[str]], raw: bytes
) -> McpVerdict:
    """The verdict on one POST to an endpoint; `headers` by lower-case name."""
    body = read_body(content_type, raw, policy.max_body)
    if isinstance(body, str):
        return McpVerdict(Reason.MCP_BAD_REQUEST, body)
    names = _names(body)
    mismatch = _headers_problem(body, headers)
    if mismatch is not None:
        return McpVerdict(Reason.MCP_BAD_REQUEST, mismatch, body, *names)
    for message in body.messages:
        refused = judge_message(policy, message)
        if refused is not None:
            return McpVerdict(refused[0], refused[1], body, *names)
    return McpVerdict(None, "", body, *names)


def judge_message(policy: McpPolicy, message: Message) -> tuple[Reason, str] | None:
    """Why one message is refused, or None. A response (no method) answers the server
    and is not judged by method (D213)."""
    method = message.method
    if method is None:
        return None
    if method not in policy.methods:
        return Reason.MCP_METHOD_DENIED, f"the method {_shown(method)} is not in mcp.methods"
    if method != "tools/call":
        return None
    name, arguments = message.params.get("name"), message.params.get("arguments", {})
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return Reason.MCP_BAD_REQUEST, "tools/call needs a string name and object arguments"
    if not policy.tool_allowed(name):
        return Reason.MCP_TOOL_DENIED, f"the tool {_shown(name)} is not in mcp.tools"
    tool = policy.tools.get(name) if policy.tools is not None else None
    for clause in tool.clauses if tool is not None else ():
        value: Any = arguments
        for part in clause.path:
            value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
        if value is _MISSING or not clause.holds(value):
            where = _shown(".".join(clause.path))
            return Reason.MCP_ARGUMENT_DENIED, f"the argument {where} of {_shown(name)} fails"
    return None


_MISSING = object()


def _headers_problem(body: Body, headers: Mapping[str, list[str]]) -> str | None:
    methods, names = headers.get("mcp-method", []), headers.get("mcp-name", [])
    if len(methods) > 1 or len(names) > 1:
        return "Mcp-Method or Mcp-Name is sent twice"
    for message in body.messages:
        if methods and message.method != methods[0]:
            return "the Mcp-Method header does not match the body"
        key = NAME_BEARING.get(message.method or "")
        if names and (key is None or message.params.get(key) != decode_name(names[0])):
            return "the Mcp-Name header does not match the body"
    return None


def decode_name(value: str) -> str | None:
    """An `Mcp-Name` value: plain, or `=?base64?...?=` over UTF-8 (the MCP transport's)."""
    if not (value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11):
        return value
    payload = value[9:-2]
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode() != payload:
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _names(body: Body) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(methods, tools, argument names) of the body, bounded, for the audit line."""
    methods: dict[str, None] = {}
    tools: dict[str, None] = {}
    arguments: dict[str, None] = {}
    for message in body.messages:
        methods[_bounded(message.method or "(response)")] = None
        if message.method == "tools/call" and isinstance(message.params.get("name"), str):
            tools[_bounded(message.params["name"])] = None
            given = message.params.get("arguments")
            for key in given if isinstance(given, dict) else ():
                arguments[_bounded(key)] = None
    return tuple(methods)[:MAX_NAMES], tuple(tools)[:MAX_NAMES], tuple(arguments)[:MAX_NAMES]


def _bounded(text: str) -> str:
    return text[:NAME_LENGTH]


def _shown(text: str) -> str:
    return json.dumps(text[:NAME_LENGTH])


def refusal_body(reason: Reason, detail: str, body: Body | None) -> bytes:
    """The JSON-RPC error answering a refused POST. One message: its id; a batch: one
    error per request of it, in order (D214); nothing readable: id null."""
    error = {
        "code": ERROR_CODE,
        "message": f"egress_denied: {reason.value}: {detail}",
        "data": {"reason": reason.value, "detail": detail},
    }
    ids = [m.id for m in body.messages if m.has_id and m.method] if body is not None else []
    if body is not None and body.batch and ids:
        answer: Any = [{"jsonrpc": "2.0", "id": i, "error": error} for i in ids]
    else:
        answer = {"jsonrpc": "2.0", "id": ids[0] if ids else None, "error": error}
    return json.dumps(answer).encode()
