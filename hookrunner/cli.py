# PYTHON_ARGCOMPLETE_OK  (argcomplete: this console script completes itself, D157)
"""``hookrunner``: validate, run and exec (docs/hooks.md#command-line), a long-lived session, and
``fire``.

Exit codes:
* ``validate``: 0 every discovered file is valid (``.ax-code/hooks.json`` and the
  ``--ax-config`` operator file included), 1 problems (one line each on stdout:
  ``FILE: LOCATION: REASON``); a warning (``warning: FILE: LOCATION: REASON``, e.g. a
  settings file's event this runner does not fire) is said and does not fail;
* ``run``: 0 allow (always for post), 1 deny;
* ``fire`` (the AX Code dialect, ``hookrunner.ax.cli``): 0 allow, 1 deny or ask;
* ``exec``: 0 ``ok``, 1 ``denied`` or ``error`` (the JSON says which);
* ``session``: 0 at the end of stdin;
* every command: 2 for a usage error, a malformed payload or an unusable
  workspace, 3 for an internal error (never 1, which would read as a deny).
Results are JSON on stdout; warnings and decision lines go to stderr (the
library logs them through ``logging``; ``configure_logging`` prints them as is).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from sandbox_egress.common.completion import offer_completions
from sandbox_egress.common.endpoint import parse_endpoint
from sandbox_egress.common.logs import add_log_format_option
from sandbox_egress.common.serve import MetricsServer, add_build_info
from sandbox_egress.common.versions import DefaultsHelpFormatter, add_version_option

# The one module outside hookrunner.ax that imports it: the command line wires the
# dialects together (tests/hookrunner/test_layering.py holds every other module to that).
from sandbox_egress.hookrunner.ax import metrics as ax_metrics
from sandbox_egress.hookrunner.ax.cli import (
    Entry,
    add_claude_parser,
    add_fire_parser,
    run_claude,
    run_fire,
)
from sandbox_egress.hookrunner.ax.loader import MANAGED_SETTINGS, SettingsPlaces, validate_ax_files
from sandbox_egress.hookrunner.console import configure_logging, emit, read_stdin_json, say
from sandbox_egress.hookrunner.enforce import bounds
from sandbox_egress.hookrunner.enforce.bounds import PayloadRefused
from sandbox_egress.hookrunner.enforce.isolation import make_undumpable
from sandbox_egress.hookrunner.enforce.tools import TOOLS
from sandbox_egress.hookrunner.errors import (
    HookRunnerError,
    PayloadError,
    UsageError,
    WorkspaceError,
)
from sandbox_egress.hookrunner.loader import load_config
from sandbox_egress.hookrunner.metrics import (
    HookMetrics,
    default_metrics,
    register_dialect,
)
from sandbox_egress.hookrunner.model import Event, EventPayload
from sandbox_egress.hookrunner.session import HookSession, parse_event_payload

DEFAULTS = DefaultsHelpFormatter  # every option's help shows its default
EXIT_USAGE = 2
EXIT_INTERNAL = 3

register_dialect(ax_metrics.register)  # every HookMetrics of the command shows both dialects


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookrunner", description="Run hooks.json hooks.", formatter_class=DEFAULTS
    )
    add_version_option(parser, "hookrunner", mitmproxy=False)
    add_log_format_option(parser)
    commands = parser.add_subparsers(dest="command", required=True, help="each has its own --help")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--workspace", default=".", help="workspace directory (default: .)")
        sub.add_argument(
            "--system-config", default=None, help="replaces /.agents/hooks.json (operator file)"
        )

    def running(sub: argparse.ArgumentParser) -> None:
        common(sub)
        sub.add_argument(
            "--full-env",
            action="store_true",
            help="give command hooks the unsanitised environment (also HOOKRUNNER_FULL_ENV=1)",
        )
        sub.add_argument("--ca-file", default=None, help="CA bundle for http hooks")

    def executing(sub: argparse.ArgumentParser) -> None:
        running(sub)
        sub.add_argument("--environment-id", default="", help="environment_id in payloads")
        sub.add_argument(
            "--tool-timeout", type=float, default=300.0, help="code_execution deadline, seconds"
        )
        sub.add_argument(
            "--tool-user",
            default=None,
            help="user the tools run as (default as root: nobody; also HOOKRUNNER_TOOL_USER)",
        )

    validate = commands.add_parser(
        "validate", help="check every discovered hooks.json", formatter_class=DEFAULTS
    )
    common(validate)
    validate.add_argument(
        "--ax-config", default=None, help="also check an operator AX hooks file (as fire loads it)"
    )
    validate.add_argument(
        "--managed-settings",
        default=None,
        metavar="PATH",
        help="Claude Code's managed settings file (default /etc/claude-code/managed-settings.json)",
    )
    run = commands.add_parser(
        "run", help="run the hooks of one event (payload on stdin)", formatter_class=DEFAULTS
    )
    run.add_argument("event", choices=[e.value for e in Event], help="the event of the payload")
    running(run)
    exec_ = commands.add_parser(
        "exec", help="run a tool between its hooks (args on stdin)", formatter_class=DEFAULTS
    )
    exec_.add_argument("tool", choices=TOOLS, help="the built-in tool to run")
    executing(exec_)
    session = commands.add_parser(
        "session", help="long-lived: JSON requests, one per line", formatter_class=DEFAULTS
    )
    executing(session)
    session.add_argument("--metrics", default=None, metavar="HOST:PORT", help="serve /metrics")
    add_fire_parser(commands)
    add_claude_parser(commands)
    return parser


_PREPARED: list[argparse.ArgumentParser] = []  # the warm runner's, built before it forks


def prepare() -> None:
    """Build the parser now (~5 ms of argparse): the warm runner (``claude serve``) does
    it once before it forks a child per call, which parses with its copy (D250). Parsing
    leaves a parser as it was, so every call reads its argv alone."""
    _PREPARED[:] = [_parser()]


def main(argv: list[str] | None = None) -> int:
    make_undumpable()  # before anything is spawned: /proc/<runner>/environ stays closed
    parser = _PREPARED[0] if _PREPARED else _parser()
    offer_completions(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_format)
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "run":
            return _run(args)
        if args.command == "exec":
            return _exec(args)
        if args.command == "fire":
            return run_fire(args)
        if args.command == "claude":
            return run_claude(args, Entry(main, prepare))
        return _session(args)
    except HookRunnerError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug must not exit 1, which means deny
        say(f"internal error: {type(exc).__name__}: {exc}")
        return EXIT_INTERNAL


def _validate(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.workspace):
        raise WorkspaceError(f"workspace {args.workspace!r} is not a directory")
    system = Path(args.system_config) if args.system_config else None
    workspace = Path(os.path.realpath(args.workspace))
    config = load_config(workspace, system)
    operator = Path(args.ax_config) if args.ax_config else None
    managed = Path(args.managed_settings) if args.managed_settings else None
    home = os.environ.get("HOME")
    places = SettingsPlaces(
        home=Path(home) if home else None,
        managed=managed or MANAGED_SETTINGS,
        managed_explicit=managed is not None,
    )
    ax_files, ax_problems = validate_ax_files(workspace, operator, places)
    problems = (*config.problems, *ax_problems)
    for problem in problems:
        sys.stdout.write(f"{'warning: ' if problem.warning else ''}{problem}\n")
    if any(not problem.warning for problem in problems):
        return 1
    files = ", ".join((*config.files, *ax_files)) or "none found"
    say(f"valid ({files})")
    return 0


def _open(args: argparse.Namespace, metrics: HookMetrics | None = None) -> HookSession:
    return HookSession(
        args.workspace,
        system_config=args.system_config,
        environment_id=getattr(args, "environment_id", ""),
        full_env=True if args.full_env else None,
        ca_file=args.ca_file,
        metrics=metrics or HookMetrics(),
        tool_timeout=getattr(args, "tool_timeout", 300.0),
        tool_user=getattr(args, "tool_user", None),
    )


def _run(args: argparse.Namespace) -> int:
    event = Event(args.event)
    try:
        payload: EventPayload | None = parse_event_payload(event, read_stdin_json())
        refusal = None
    except PayloadRefused as exc:  # beyond the bound: refused, not malformed
        payload, refusal = None, str(exc)
    session = _open(args)
    if event is Event.POST:
        if payload is None:
            session.refused(event, "", str(refusal))
        else:
            session.report(payload)
        emit({"decision": "allow"})
        return 0
    if payload is None:
        decision = session.refused(event, "", str(refusal))
    else:
        decision = session.decide(payload)
    emit(decision.to_json())
    return 0 if decision.allowed else 1


def _exec(args: argparse.Namespace) -> int:
    try:
        tool_args = read_stdin_json()
    except PayloadRefused as exc:
        emit(_open(args).refused_exec(args.tool, str(exc)).to_json())
        return 1
    if not isinstance(tool_args, dict):
        raise PayloadError("the tool arguments on stdin must be a JSON object")
    session = _open(args)
    session.check_workspace_access()
    session.check_boundary()
    result = session.exec_tool(args.tool, tool_args)
    emit(result.to_json())
    return 0 if result.status == "ok" else 1


def _session(args: argparse.Namespace) -> int:
    try:
        address = parse_endpoint(args.metrics, port_zero=True) if args.metrics else None
    except ValueError as exc:
        raise UsageError(f"--metrics: {exc}") from None
    metrics = default_metrics() if address else HookMetrics()
    session = _open(args, metrics)
    session.check_workspace_access()
    session.check_boundary()
    server = None
    if address is not None:
        add_build_info(metrics.registry, "hookrunner")
        server = MetricsServer(address, metrics.registry)
        server.start()
    try:
        if server is not None:
            say(f"metrics on {server.url}")
        if server is not None:
            server.ready.set()  # /healthz: 200 from here on, before the line says so
        say("session ready")
        for line in sys.stdin.buffer:
            if line.strip():
                emit(_answer(session, line))
    finally:
        if server is not None:
            server.stop()
    return 0


def _answer(session: HookSession, line: bytes) -> dict[str, Any]:
    """One session request: {"event": ..., <payload>} or {"exec": TOOL, "args": {...}}.

    A request beyond the bound that cannot even be read is refused in both forms at
    once (``status`` ``error`` and ``decision`` ``deny``): it is unknown which it was.
    """
    try:
        request = bounds.parse(line)
    except PayloadRefused as exc:
        reason = str(exc)
        session.refused(Event.PRE, "", reason)
        return {
            "status": "error",
            "output": "",
            "error": reason,
            "decision": "deny",
            "reason": reason,
        }
    except PayloadError as exc:
        return {"status": "invalid", "error": str(exc)}
    try:
        if not isinstance(request, dict):
            raise PayloadError("a request must be a JSON object")
        if "exec" in request:
            if request["exec"] not in TOOLS:
                raise PayloadError(f"unknown tool {request['exec']!r}")
            tool_args = request.get("args", {})
            if not isinstance(tool_args, dict):
                raise PayloadError('"args" must be an object')
            return session.exec_tool(request["exec"], tool_args).to_json()
        try:
            event = Event(str(request.get("event")))
        except ValueError:
            raise PayloadError(
                '"event" must be pre_tool_execution or post_tool_execution'
            ) from None
        fields = {k: v for k, v in request.items() if k != "event"}  # "event" is the request's
        try:
            payload = parse_event_payload(
                event, fields, default_environment_id=session.environment_id
            )
        except PayloadRefused as exc:
            decision = session.refused(event, "", str(exc))
            return {"decision": "allow"} if event is Event.POST else decision.to_json()
        if event is Event.POST:
            session.report(payload)
            return {"decision": "allow"}
        return session.decide(payload).to_json()
    except (ValueError, RecursionError, HookRunnerError) as exc:
        return {"status": "invalid", "error": str(exc)}


if __name__ == "__main__":  # `python -m sandbox_egress.hookrunner.cli`
    sys.exit(main())
