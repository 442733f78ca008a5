"""Immutable values shared by every layer of the hook runner.

The loader turns ``hooks.json`` into these frozen dataclasses once per
session; nothing downstream re-parses configuration strings. ``Outcome`` is
the closed set of results a single handler run can have: it is the
``outcome`` label of ``hook_runs_total`` and is documented in docs/hooks.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from common.problems import Problem
from hookrunner.matcher import Matcher

__all__ = ["Problem"]  # one Problem for every configuration file (common.problems)


class Event(StrEnum):
    PRE = "pre_tool_execution"
    POST = "post_tool_execution"


class HandlerType(StrEnum):
    COMMAND = "command"
    HTTP = "http"


class Outcome(StrEnum):
    """What one handler run came to. Every value except ALLOW, DENY and OK is a failure."""

    ALLOW = "allow"  # pre: a JSON object with "decision": "allow"
    DENY = "deny"  # pre: exactly a JSON object with "decision": "deny"
    OK = "ok"  # post: exit status 0 / a 2xx response (output ignored)
    EMPTY_OUTPUT = "empty_output"  # pre: nothing but whitespace on stdout / in the body
    UNRECOGNISED = "unrecognised"  # pre: valid JSON that is not a decision object
    UNPARSEABLE = "unparseable"  # pre: not JSON, not UTF-8, duplicate keys, trailing text
    NEAR_MISS = "near_miss"  # pre: looks like a deny but is not exactly one
    TRUNCATED = "truncated"  # pre: output above the 1 MiB cap
    EXIT_NONZERO = "exit_nonzero"  # the command exited with a status other than 0, 126, 127
    NOT_FOUND = "not_found"  # exit status 127: the shell did not find the program
    NOT_EXECUTABLE = "not_executable"  # exit status 126: found but not executable
    CRASHED = "crashed"  # the command was killed by a signal it did not get from us
    TIMEOUT = "timeout"  # the deadline passed; the process group was killed
    SPAWN_ERROR = "spawn_error"  # the shell could not be started at all
    HTTP_ERROR = "http_error"  # a non-2xx status (3xx included: redirects are not followed)
    NETWORK_ERROR = "network_error"  # DNS, refused, reset, malformed response
    TLS_ERROR = "tls_error"  # certificate not trusted, handshake failed, CA file unusable
    PROXY_REFUSED = "proxy_refused"  # the egress proxy answered the CONNECT with non-2xx
    PROXY_UNUSABLE = "proxy_unusable"  # HTTPS_PROXY cannot be used (reported at session start)

    @property
    def failed(self) -> bool:
        return self not in (Outcome.ALLOW, Outcome.DENY, Outcome.OK)


@dataclass(frozen=True)
class CommandHandler:
    command: str
    timeout: int
    where: str  # file and JSON path, for warnings

    type = HandlerType.COMMAND


@dataclass(frozen=True)
class HttpHandler:
    url: str
    headers: tuple[tuple[str, str], ...]
    timeout: int
    where: str

    type = HandlerType.HTTP


Handler = CommandHandler | HttpHandler


@dataclass(frozen=True)
class Rule:
    matcher: Matcher
    handlers: tuple[Handler, ...]


@dataclass(frozen=True)
class Group:
    name: str
    enabled: bool
    pre: tuple[Rule, ...]
    post: tuple[Rule, ...]
    source: str

    def rules(self, event: Event) -> tuple[Rule, ...]:
        return self.pre if event is Event.PRE else self.post


@dataclass(frozen=True)
class HookConfig:
    """The snapshot of every discovered hooks.json, taken at session start."""

    groups: tuple[Group, ...]
    problems: tuple[Problem, ...]
    files: tuple[str, ...]


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class EventPayload:
    """The JSON a handler receives on stdin or as the POST body (SPEC 2.4).

    Payloads are open: the fields of the caller's payload the runner does not
    read (``extra`` at the top level, ``call_extra`` inside ``tool_call``, such
    as a call id) are passed to handlers unchanged, next to the ones it does.
    """

    event: Event
    tool_call: ToolCall
    environment_id: str
    error: str | None = None  # post only: stderr or the failure text of the tool
    extra: Mapping[str, Any] = field(default_factory=dict)
    call_extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        call = {**self.call_extra, "name": self.tool_call.name, "args": dict(self.tool_call.args)}
        body: dict[str, Any] = {
            **self.extra,
            "tool_call": call,
            "environment_id": self.environment_id,
        }
        if self.event is Event.POST and self.error:
            body["error"] = self.error
        return body

    def encode(self) -> bytes:
        return encode_json(self.to_json())


def encode_json(value: Any) -> bytes:
    """UTF-8 JSON; falls back to ASCII escapes when a lone surrogate cannot be encoded."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True).encode("ascii")


@dataclass(frozen=True)
class HandlerRun:
    """The result of running one handler once."""

    event: Event
    group: str
    handler: Handler
    outcome: Outcome
    detail: str  # the cause, for warnings; never contains environment values
    duration: float
    reason: str | None = None  # the deny reason (pre, outcome DENY)
    near_miss: str | None = None  # why the output looked like a deny without being one


@dataclass(frozen=True)
class PreDecision:
    """The aggregated verdict of every pre_tool_execution handler for one call."""

    allowed: bool
    reason: str | None = None
    group: str | None = None
    runs: tuple[HandlerRun, ...] = ()

    def to_json(self) -> dict[str, str]:
        if self.allowed:
            return {"decision": "allow"}
        return {"decision": "deny", "reason": self.reason or "", "group": self.group or ""}
