"""Aggregation of handler runs into the result of one event (pure).

Invariants (docs/hooks.md#execution-and-decisions;
docs/hooks.md#decisions-where-the-specification-is-silent):
* enabled groups in configuration order (operator file first), rules in
  declaration order, every rule whose matcher matches, handlers in
  declaration order, one at a time;
* pre_tool_execution: the first ``deny`` stops everything after it and is the
  decision, with its reason and its group; so does the first failure of a
  handler of a ``fail_closed`` group (the failure is the reason); anything
  else lets the next handler run and, at the end, allows;
* post_tool_execution: every matching handler runs; none can change anything.

The handlers themselves run through the ``RunHandler`` callable given in, so
this module never starts a process or opens a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sandbox_egress.hookrunner.model import (
    Event,
    EventPayload,
    Group,
    Handler,
    HandlerRun,
    HookConfig,
    PreDecision,
)
from sandbox_egress.hookrunner.outcome import Outcome

RunHandler = Callable[[Group, Handler, EventPayload], HandlerRun]


def default_reason(group: str) -> str:
    return f'Tool call denied by hook group "{group}".'


def fail_closed_reason(run: HandlerRun) -> str:
    return (
        f'hook group "{run.group}" fails closed and its handler {run.outcome.value}: {run.detail}'
    )


def matching_handlers(
    config: HookConfig, event: Event, tool: str
) -> Iterator[tuple[Group, Handler]]:
    for group in config.groups:
        if not group.enabled:
            continue
        for rule in group.rules(event):
            if rule.matcher.matches(tool):
                for handler in rule.handlers:
                    yield group, handler


def decide_pre(config: HookConfig, payload: EventPayload, run: RunHandler) -> PreDecision:
    if payload.event is not Event.PRE:
        raise ValueError("decide_pre needs a pre_tool_execution payload")
    runs: list[HandlerRun] = []
    for group, handler in matching_handlers(config, Event.PRE, payload.tool_call.name):
        result = run(group, handler, payload)
        runs.append(result)
        if result.outcome is Outcome.DENY:
            reason = result.reason or default_reason(group.name)
            return PreDecision(False, reason, group.name, tuple(runs))
        if group.fail_closed and result.outcome.failed:
            return PreDecision(False, fail_closed_reason(result), group.name, tuple(runs))
    return PreDecision(True, runs=tuple(runs))


def notify_post(
    config: HookConfig, payload: EventPayload, run: RunHandler
) -> tuple[HandlerRun, ...]:
    if payload.event is not Event.POST:
        raise ValueError("notify_post needs a post_tool_execution payload")
    return tuple(
        run(group, handler, payload)
        for group, handler in matching_handlers(config, Event.POST, payload.tool_call.name)
    )
