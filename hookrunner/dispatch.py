"""Running one hooks.json handler for one event: the mechanism, then its interpretation.

A command handler runs through ``Kernel.spawn`` (``/bin/sh -c COMMAND`` in the
workspace) with the event JSON on stdin and the ``HOOK_*`` variables; an http
handler is POSTed through ``HttpClient``. The result is decoded (``decode``),
reported (one warning line for a failure, and the metrics) and returned.
"""

from __future__ import annotations

from sandbox_egress.hookrunner.decode import Classified, decode_http, decode_process
from sandbox_egress.hookrunner.enforce.envsan import hook_variables
from sandbox_egress.hookrunner.httpclient import HttpClient
from sandbox_egress.hookrunner.kernel import Kernel
from sandbox_egress.hookrunner.model import (
    CommandHandler,
    Event,
    EventPayload,
    Group,
    Handler,
    HandlerRun,
)
from sandbox_egress.hookrunner.outcome import Outcome
from sandbox_egress.hookrunner.report import Reporter, WarningKind


class HandlerExecutor:
    def __init__(self, kernel: Kernel, http: HttpClient, boundary: str = "") -> None:
        self.kernel = kernel
        self.http = http
        self.boundary = boundary  # HOOK_BOUNDARY for command handlers (D194); "" sets none

    def with_boundary(self, boundary: str) -> HandlerExecutor:
        """The same executor, telling command handlers what stands below the tool."""
        return HandlerExecutor(self.kernel, self.http, boundary)

    def __call__(self, group: Group, handler: Handler, payload: EventPayload) -> HandlerRun:
        if isinstance(handler, CommandHandler):
            classified, duration = self._command(handler, payload)
        else:
            result = self.http.post(
                handler.url,
                payload.encode(),
                handler.headers,
                handler.timeout,
                read_body=payload.event is Event.PRE,
            )
            classified, duration = decode_http(payload.event, result), result.duration
        run = HandlerRun(
            event=payload.event,
            group=group.name,
            handler=handler,
            outcome=classified.outcome,
            detail=classified.detail,
            duration=duration,
            reason=classified.reason,
            near_miss=classified.near_miss,
        )
        report_run(self.kernel.reporter, run, fail_closed=group.fail_closed)
        return run

    def _command(self, handler: CommandHandler, payload: EventPayload) -> tuple[Classified, float]:
        call = payload.tool_call
        result = self.kernel.spawn(
            handler.command,
            stdin=payload.encode(),
            variables=hook_variables(
                payload.event.value, call.name, call.args, boundary=self.boundary
            ),
            timeout=handler.timeout,
        )
        return decode_process(payload.event, result, handler.timeout), result.duration


def report_run(reporter: Reporter, run: HandlerRun, *, fail_closed: bool = False) -> None:
    """The run's metrics, and a warning line when it failed (its kind says what it caused)."""
    reporter.metrics.observe_run(run.event.value, run.handler.type, run.outcome, run.duration)
    if not run.outcome.failed:
        return
    denied = fail_closed and run.event is Event.PRE
    if run.event is Event.POST:
        kind = WarningKind.POST_FAILURE
    elif denied:
        kind = WarningKind.FAIL_CLOSED
    elif run.outcome is Outcome.NEAR_MISS:
        kind = WarningKind.NEAR_MISS
    else:
        kind = WarningKind.FAIL_OPEN
    fields = {
        "event": run.event.value,
        "type": run.handler.type.value,
        "outcome": run.outcome.value,
        "group": run.group,
        "where": run.handler.where,
        "cause": run.detail,
    }
    if run.event is Event.PRE:
        fields["action"] = "denied" if denied else "allowed"
    reporter.warn(kind, **fields)
