"""The Python API for agent runtimes: one ``HookSession`` per agent session.

Opening a session loads every hooks.json once and snapshots the environment;
``pre`` asks for the decision of a pre_tool_execution event, ``post`` reports
a post_tool_execution event, ``exec_tool`` runs a built-in tool between them::

    session = HookSession("/workspace", environment_id="env_xyz789")
    decision = session.pre("read_file", {"path": "/workspace/private/x.json"})
    if decision.allowed:
        ...  # run the tool
        session.post("read_file", {"path": ...}, error=None)

    result = session.exec_tool("code_execution", {"code": "ls", "language": "bash"})

Configuration problems are reported (a warning line and the metrics) when the
session opens, once: those of the hooks files, a ``HOOKRUNNER_FULL_ENV`` that is
set but not ``1``, and an unusable ``HTTPS_PROXY`` when an http handler would
need it; the session then runs with the valid rest. The setup every dialect
shares (workspace, environment snapshot, reporter, spawning) is ``kernel.Kernel``.

A payload beyond ``bounds`` (nested deeper than 64 levels, larger than 8 MiB)
never reaches a hook: ``pre`` denies it, ``exec_tool`` answers ``error``
without running the tool, ``post`` runs no hook.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from sandbox_egress.hookrunner.aggregate import decide_pre, notify_post
from sandbox_egress.hookrunner.dispatch import HandlerExecutor
from sandbox_egress.hookrunner.enforce.bounds import PayloadRefused
from sandbox_egress.hookrunner.enforce.envsan import sanitise
from sandbox_egress.hookrunner.enforce.isolation import tool_user as resolve_tool_user
from sandbox_egress.hookrunner.enforce.isolation import workspace_write_problem
from sandbox_egress.hookrunner.enforce.toolns import boundary as tool_boundary
from sandbox_egress.hookrunner.enforce.toolns import boundary_problem
from sandbox_egress.hookrunner.enforce.tools import Workspace, run_tool
from sandbox_egress.hookrunner.errors import PayloadError
from sandbox_egress.hookrunner.handlerhost import handler_host
from sandbox_egress.hookrunner.httpclient import HttpClient
from sandbox_egress.hookrunner.kernel import Kernel, full_env_switch
from sandbox_egress.hookrunner.loader import load_config
from sandbox_egress.hookrunner.metrics import HookMetrics
from sandbox_egress.hookrunner.model import (
    Event,
    EventPayload,
    HandlerRun,
    HookConfig,
    HttpHandler,
    PreDecision,
    ToolCall,
)
from sandbox_egress.hookrunner.proxyroute import proxy_problem
from sandbox_egress.hookrunner.report import WarningKind

DEFAULT_TOOL_TIMEOUT = 300.0


@dataclass(frozen=True)
class ExecResult:
    status: str  # "ok" | "denied" | "error"
    output: str
    reason: str | None = None
    error: str | None = None
    group: str | None = None

    def to_json(self) -> dict[str, str]:
        body = {"status": self.status, "output": self.output}
        if self.reason is not None:
            body["reason"] = self.reason
        if self.error is not None:
            body["error"] = self.error
        return body


class HookSession:
    def __init__(
        self,
        workspace: str | Path,
        *,
        system_config: str | Path | None = None,
        environment_id: str = "",
        environ: Mapping[str, str] | None = None,
        full_env: bool | None = None,
        ca_file: str | None = None,
        metrics: HookMetrics | None = None,
        stream: TextIO | None = None,
        tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
        log_decisions: bool = True,
        tool_user: str | None = None,
    ) -> None:
        self.kernel = Kernel(
            workspace, environ=environ, metrics=metrics, stream=stream, log_decisions=log_decisions
        )
        root, snapshot = self.kernel.workspace, self.kernel.environ
        self.workspace = Workspace(root)
        self.environment_id = environment_id
        self.tool_timeout = tool_timeout
        self.tool_user = resolve_tool_user(tool_user, snapshot)
        full = full_env_switch(snapshot, full_env)
        self.metrics, self.reporter = self.kernel.metrics, self.kernel.reporter
        system = Path(system_config) if system_config is not None else None
        self.config: HookConfig = load_config(root, system)
        self.kernel.configuration(self.config.problems, (full.notice,))
        # The full-environment switch is for the operator's command hooks only: the
        # agent's own code always gets the sanitised environment.
        self.tool_env = dict(sanitise(snapshot).variables)
        self.kernel.start_hooks(full.on)
        proxy = proxy_problem(snapshot, http_targets(self.config))
        if proxy is not None:
            self.reporter.proxy_problem(proxy)
        self._run = HandlerExecutor(self.kernel, HttpClient(snapshot, ca_file))

    def check_workspace_access(self) -> str | None:
        """Say once, as a warning, when the tool user cannot write the workspace (``exec`` and
        ``session`` call it at start; a runtime calls it before its first ``exec_tool``)."""
        problem = workspace_write_problem(self.workspace.root, self.tool_user)
        if problem is not None:
            self.reporter.warn(WarningKind.WORKSPACE, cause=problem)
        return problem

    def check_boundary(self) -> str | None:
        """Say once, as a warning, when the tools cannot run in the runner's namespace (no git
        guard, no mask): the packs then refuse what they cannot read (D190)."""
        problem = boundary_problem()
        if problem is not None:
            self.reporter.warn(WarningKind.BOUNDARY, cause=problem)
        return problem

    def payload(
        self,
        event: Event,
        tool: str,
        args: Mapping[str, Any],
        error: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> EventPayload:
        """The event's payload; ``fields`` are the runtime's own (a call id...), passed on."""
        if not isinstance(tool, str) or not tool:
            raise PayloadError("the tool name must be a non-empty string")
        if not isinstance(args, Mapping):
            raise PayloadError("the tool arguments must be a JSON object")
        if error is not None and not isinstance(error, str):
            raise PayloadError('"error" must be a string')
        extra = dict(fields or {})
        taken = sorted(set(extra) & {"tool_call", "environment_id", "error"})
        if taken:
            raise PayloadError(f"fields cannot set {', '.join(taken)}: the runner writes them")
        call = ToolCall(tool, dict(args))
        payload = EventPayload(event, call, self.environment_id, error or None, extra)  # bounded
        for what, value in (("the tool arguments", dict(args)), ("the fields", extra)):
            try:
                json.dumps(value)
            except (TypeError, ValueError) as exc:
                raise PayloadError(f"{what} are not JSON: {exc}") from None
        return payload

    def pre(
        self, tool: str, args: Mapping[str, Any], *, fields: Mapping[str, Any] | None = None
    ) -> PreDecision:
        try:
            payload = self.payload(Event.PRE, tool, args, fields=fields)
        except PayloadRefused as exc:
            return self.refused(Event.PRE, tool, str(exc))
        return self.decide(payload)

    def refused(self, event: Event, tool: str, reason: str) -> PreDecision:
        """A payload beyond ``bounds``: no hook sees it; a pre event is denied with the reason."""
        self.reporter.input_refused(event.value, reason, blocks=event is Event.PRE)
        decision = PreDecision(False, reason)
        if event is Event.PRE:
            self._report_decision(tool, decision)
        return decision

    def decide(self, payload: EventPayload, boundary: str = "") -> PreDecision:
        """``boundary``: what stands below a tool this runner runs (``exec_tool``)."""
        runner = self._run.with_boundary(boundary) if boundary else self._run
        decision = decide_pre(self.config, payload, runner)
        if decision.reason is not None:  # a failure's reason quotes a handler's stderr
            decision = replace(decision, reason=self.reporter.redact(decision.reason))
        self._report_decision(payload.tool_call.name, decision)
        return decision

    def _report_decision(self, tool: str, decision: PreDecision) -> None:
        self.metrics.observe_decision(decision.allowed)
        if not self.reporter.log_decisions:
            return
        fields = {
            "event": Event.PRE.value,
            "tool": tool,
            "decision": "allow" if decision.allowed else "deny",
            "handlers": str(len(decision.runs)),
        }
        if not decision.allowed:
            fields["group"] = decision.group or ""
            fields["reason"] = decision.reason or ""
        self.reporter.line("decision", fields)

    def post(
        self,
        tool: str,
        args: Mapping[str, Any],
        error: str | None = None,
        *,
        fields: Mapping[str, Any] | None = None,
    ) -> tuple[HandlerRun, ...]:
        try:
            payload = self.payload(Event.POST, tool, args, error, fields)
        except PayloadRefused as exc:
            self.refused(Event.POST, tool, str(exc))
            return ()
        return self.report(payload)

    def report(self, payload: EventPayload) -> tuple[HandlerRun, ...]:
        return notify_post(self.config, payload, self._run)

    def exec_tool(self, tool: str, args: Mapping[str, Any]) -> ExecResult:
        """Pre hooks, then the tool unless denied, then post hooks with its error.

        A payload beyond ``bounds`` is an ``error``: no hook sees it, the tool does not run.
        """
        try:
            payload = self.payload(Event.PRE, tool, args)
        except PayloadRefused as exc:
            return self.refused_exec(tool, str(exc))
        decision = self.decide(payload, self._boundary(tool))
        if not decision.allowed:
            return ExecResult("denied", "", reason=decision.reason, group=decision.group)
        result = run_tool(
            tool,
            args,
            workspace=self.workspace,
            env=self.tool_env,
            timeout=self.tool_timeout,
            user=self.tool_user,
        )
        self.post(tool, args, result.error)
        return ExecResult("ok" if result.ok else "error", result.output, error=result.error)

    def _boundary(self, tool: str) -> str:
        return tool_boundary(self.tool_env) if tool == "code_execution" else ""

    def refused_exec(self, tool: str, reason: str) -> ExecResult:
        """``exec``'s answer to a payload beyond ``bounds``: an error, the tool not run."""
        self.refused(Event.PRE, tool, reason)
        return ExecResult("error", "", error=reason)


def parse_event_payload(
    event: Event, document: Any, *, default_environment_id: str = ""
) -> EventPayload:
    """Check the docs/hooks.md#events-and-payloads payload read by ``hookrunner run``: only the
    fields the runner reads."""
    if not isinstance(document, dict):
        raise PayloadError("the payload must be a JSON object")
    call = document.get("tool_call")
    if not isinstance(call, dict):
        raise PayloadError('"tool_call" must be an object')
    name, args = call.get("name"), call.get("args", {})
    if not isinstance(name, str) or not name:
        raise PayloadError('"tool_call.name" must be a non-empty string')
    if not isinstance(args, dict):
        raise PayloadError('"tool_call.args" must be an object')
    environment_id = document.get("environment_id", default_environment_id)
    if not isinstance(environment_id, str):
        raise PayloadError('"environment_id" must be a string')
    error = document.get("error") if event is Event.POST else None
    if error is not None and not isinstance(error, str):
        raise PayloadError('"error" must be a string')
    # Open payloads: what the runner does not read reaches the handlers unchanged.
    read = (
        {"tool_call", "environment_id", "error"}
        if event is Event.POST
        else {"tool_call", "environment_id"}
    )
    extra = {k: v for k, v in document.items() if k not in read}
    call_extra = {k: v for k, v in call.items() if k not in ("name", "args")}
    return EventPayload(
        event, ToolCall(name, args), environment_id, error or None, extra, call_extra
    )


def http_targets(config: HookConfig) -> Iterator[tuple[str, int]]:
    """(canonical host, port) of every http handler of the enabled groups of a configuration."""
    for group in config.groups:
        if not group.enabled:
            continue
        for event in Event:
            for rule in group.rules(event):
                for handler in rule.handlers:
                    if isinstance(handler, HttpHandler):
                        parts = urlsplit(handler.url)
                        yield handler_host(parts), parts.port or 443
