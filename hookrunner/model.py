"""Immutable values of the hooks.json dialect (and ``Problem``, shared by every dialect).

The loader turns ``hooks.json`` into these frozen dataclasses once per
session; nothing downstream re-parses configuration strings. What a handler
run came to is the kernel's ``outcome.Outcome``, shared with every dialect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sandbox_egress.common.problems import Problem
from sandbox_egress.hookrunner.enforce import bounds
from sandbox_egress.hookrunner.matcher import Matcher
from sandbox_egress.hookrunner.outcome import HandlerType, Outcome

__all__ = ["Problem"]  # one Problem for every configuration file (common.problems)


class Event(StrEnum):
    PRE = "pre_tool_execution"
    POST = "post_tool_execution"


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
    fail_closed: bool = False  # a failure of one of its pre handlers denies

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
    """The JSON a handler receives on stdin or as the POST body (docs/hooks.md#events-and-payloads).

    Payloads are open: the fields of the caller's payload the runner does not
    read (``extra`` at the top level, ``call_extra`` inside ``tool_call``, such
    as a call id) are passed to handlers unchanged, next to the ones it does.
    A payload beyond ``bounds`` cannot be made (``bounds.PayloadRefused``).
    """

    event: Event
    tool_call: ToolCall
    environment_id: str
    error: str | None = None  # post only: stderr or the failure text of the tool
    extra: Mapping[str, Any] = field(default_factory=dict)
    call_extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bounds.check(self.to_json())  # no payload beyond the bound exists

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
