"""Running one handler for one event: the mechanism, then its interpretation.

A command handler runs as ``/bin/sh -c COMMAND`` in the workspace, with the
event JSON on stdin and the sanitised environment plus the ``HOOK_*``
variables; an http handler is POSTed through ``HttpClient``. The result is
classified (``outcome.py``), reported (one line and the metrics) and returned.
"""

from __future__ import annotations

from collections.abc import Mapping

from hookrunner.command import run_process
from hookrunner.envsan import hook_variables
from hookrunner.httpclient import HttpClient
from hookrunner.model import CommandHandler, Event, EventPayload, Handler, HandlerRun
from hookrunner.outcome import Classified, classify_http, classify_process
from hookrunner.report import Reporter

SHELL = "/bin/sh"


class HandlerExecutor:
    def __init__(
        self,
        workspace: str,
        base_env: Mapping[str, str],
        http: HttpClient,
        reporter: Reporter,
    ) -> None:
        self.workspace = workspace
        self.base_env = dict(base_env)
        self.http = http
        self.reporter = reporter

    def __call__(self, group: str, handler: Handler, payload: EventPayload) -> HandlerRun:
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
            classified, duration = classify_http(payload.event, result), result.duration
        run = HandlerRun(
            event=payload.event,
            group=group,
            handler=handler,
            outcome=classified.outcome,
            detail=classified.detail,
            duration=duration,
            reason=classified.reason,
            near_miss=classified.near_miss,
        )
        self.reporter.handler_run(run)
        return run

    def _command(self, handler: CommandHandler, payload: EventPayload) -> tuple[Classified, float]:
        env = {
            **self.base_env,
            "PWD": self.workspace,
            **hook_variables(payload.event.value, payload.tool_call.name, payload.tool_call.args),
        }
        result = run_process(
            [SHELL, "-c", handler.command],
            stdin=payload.encode(),
            cwd=self.workspace,
            env=env,
            timeout=handler.timeout,
        )
        return classify_process(payload.event, result, handler.timeout), result.duration
