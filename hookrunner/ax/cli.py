"""``hookrunner fire EVENT``: fire one AX Code lifecycle event, the payload on stdin.

Prints one JSON object (``ax.model.FireResult.to_json``): ``decision``
(``allow``/``deny``/``ask``), ``cause``, and when there is one ``reason``,
``source``, ``feedback`` (the ``<hook_feedback>`` block), ``tool_result``
(the payload's ``output`` with the block after it) and ``notices``.
Exit status: 0 allow, 1 deny or ask (never run the action without the human's
answer), 2 usage or payload error, 3 internal error (``hookrunner.cli``).
With ``--claude-exit-codes`` (the runner as Claude Code's hook command): 2 with
the reason on stderr when blocked (deny or ask), 0 otherwise; stdout is empty or a
document of Claude Code's hook-output schema (``ax.claudeout``), never the runner's
own JSON, which Claude Code would report as invalid. An error is a block (2) on an
event that can block, else 1 (Claude Code's non-blocking error); Claude Code's
settings files are not read in this mode, since Claude Code runs their hooks
itself (the recursion guard). ``--claude-json`` (what ``hookrunner claude install``
wires, D390) is that mode, answering every result as Claude Code's JSON at exit 0
(``ax.claudeout.claude_json``): a deny with the hook's own reason, an ask as an ask
(Claude Code is the one to ask), ``continue: false``, ``updatedInput``... passed on;
errors still exit 2 on an event that can block.

For observation-only events the answer is printed and stdout is closed at
once, before any hook runs; the process then runs the hooks (each with its
deadline) and exits. A caller reads one line and need not wait for the exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_egress.hookrunner.ax import claudeinstall, firebound, quickbuild, quickfire
from sandbox_egress.hookrunner.ax.bridge import bridge_word, grant_steps
from sandbox_egress.hookrunner.ax.claudeout import claude_answer, claude_json
from sandbox_egress.hookrunner.ax.events import EventInput, parse_event
from sandbox_egress.hookrunner.ax.model import (
    BLOCKING_EVENTS,
    OBSERVATION_EVENTS,
    AxEvent,
    FireResult,
    Verdict,
)
from sandbox_egress.hookrunner.ax.session import AxSession
from sandbox_egress.hookrunner.bridge.answer import with_bridge
from sandbox_egress.hookrunner.bridge.settings import from_env as settings_from
from sandbox_egress.hookrunner.console import emit, read_stdin_json, say
from sandbox_egress.hookrunner.enforce.bounds import PayloadRefused
from sandbox_egress.hookrunner.errors import HookRunnerError, UsageError
from sandbox_egress.hookrunner.metrics import HookMetrics

CLAUDE_BLOCK = 2  # Claude Code's exit status for "blocked"
_SPARE_METRICS: list[HookMetrics] = []  # built before the warm runner forks (D250)


def prepare_metrics() -> None:
    """Build a call's metrics now (~5 ms of prometheus objects): the warm runner does it
    once, before it forks, and each child takes its own copy of this one."""
    _SPARE_METRICS[:] = [HookMetrics()]


def _metrics() -> HookMetrics:
    """A fresh registry per call: the spare one the warm runner built, else a new one."""
    return _SPARE_METRICS.pop() if _SPARE_METRICS else HookMetrics()


def add_fire_parser(commands: Any) -> None:
    fire = commands.add_parser(
        "fire", help="fire one AX Code / Claude Code lifecycle event (payload on stdin)"
    )
    fire.add_argument(
        "event", choices=[e.value for e in AxEvent], help="the AX Code / Claude Code event"
    )
    fire.add_argument("--workspace", default=".", help="workspace directory (default: .)")
    fire.add_argument("--session-id", default="", help="HOOK_SESSION_ID (or session_id on stdin)")
    fire.add_argument(
        "--ax-config", default=None, help="an operator AX hooks file, loaded first and trusted"
    )
    fire.add_argument(
        "--trust-project-hooks",
        action="store_true",
        help="run <workspace>/.ax-code/hooks.json (also AX_CODE_TRUST_PROJECT_CONFIG=1)",
    )
    fire.add_argument(
        "--full-env",
        action="store_true",
        help="give hooks the unsanitised environment (also AX_CODE_HOOKS_FULL_ENV=1)",
    )
    fire.add_argument(
        "--managed-settings",
        default=None,
        metavar="PATH",
        help="Claude Code's managed settings file (default /etc/claude-code/managed-settings.json)",
    )
    fire.add_argument(
        "--claude-exit-codes",
        action="store_true",
        help="be Claude Code's hook: exit 2 with the reason on stderr when blocked, else 0; "
        "Claude Code settings files are not read (Claude Code runs them itself)",
    )
    fire.add_argument(
        "--claude-json",
        action="store_true",
        help="--claude-exit-codes, answering every result as Claude Code's JSON at exit 0 "
        "(deny, ask, continue: false, updatedInput... as the user's hooks said them)",
    )
    fire.add_argument(
        "--claude-hooks",
        default=None,
        metavar="PATH",
        help="the user's Claude Code hooks that `hookrunner claude install` moved here: run "
        "with their Claude Code semantics, also with --claude-exit-codes",
    )
    fire.add_argument(
        "--interactive",
        action="store_true",
        help="the caller shows an ask to a human (without it, ask is refused)",
    )


def add_claude_parser(commands: Any) -> None:
    claude = commands.add_parser(
        "claude",
        help="wire the runner as Claude Code's hook command: install makes it the hook of "
        "every event it fires (the settings file's own hooks move to a runner-owned file and "
        "keep running through it); uninstall puts them back",
    )
    claude.add_argument(
        "action",
        choices=["install", "uninstall", "serve"],
        help="what to do (serve: the warm runner the installed hook command reaches, started "
        "by it when missing)",
    )
    claude.add_argument(
        "--scope",
        choices=["user", "project"],
        default="user",
        help="~/.claude/settings.json (user) or <workspace>/.claude/settings.json (project)",
    )
    claude.add_argument("--workspace", default=".", help="workspace directory (default: .)")
    claude.add_argument(
        "--runner", default=None, help="the hookrunner command Claude Code runs (default: this one)"
    )
    claude.add_argument(
        "--ax-config", default=None, help="install: an operator AX hooks file every call runs too"
    )
    claude.add_argument(
        "--force",
        action="store_true",
        help="install: even when some hooks cannot be carried over (they are listed, and "
        "stay in the settings file, where Claude Code keeps running them)",
    )
    claude.add_argument(
        "--idle",
        type=float,
        default=quickfire.DEFAULT_IDLE_S,
        metavar="SECONDS",
        help="serve: leave after this long without a call",
    )


@dataclass(frozen=True)
class Entry:
    """The runner's command line, handed in by ``hookrunner.cli`` (which imports this
    module, not the other way round): what the warm runner (``claude serve``) calls."""

    main: Callable[[list[str] | None], int]
    prepare: Callable[[], None]


def run_claude(args: argparse.Namespace, entry: Entry) -> int:
    home = Path(os.environ["HOME"]) if os.environ.get("HOME") else None
    workspace = Path(os.path.realpath(args.workspace))
    settings = claudeinstall.settings_path(args.scope, home, workspace)
    if args.action == "serve":
        from sandbox_egress.hookrunner.ax.packs import warm

        entry.prepare()
        prepare_metrics()
        warm.enable()  # the packs run inside the warm runner's call (D396)
        try:
            _warm_up()
        except Exception:  # noqa: BLE001 - only slower calls: serving matters more
            say("warning: the warm runner's warm-up failed; serving without it")
        return quickfire.serve(entry.main, args.idle)
    runner = args.runner or _this_runner()
    moved_to = claudeinstall.moved_path(args.scope, home, workspace)
    if args.action == "uninstall":
        claudeinstall.uninstall(settings, runner, moved_to)
        say(f"{settings}: the runner's entries removed, the moved hooks put back")
        return 0
    ax_config = Path(os.path.realpath(args.ax_config)) if args.ax_config else None
    document = claudeinstall.read_json(settings)
    problems = claudeinstall.installed(document, {}, runner, {})[2]
    if problems and not args.force:
        for line in problems:
            say(f"{settings} {line}")
        say(
            f"{len(problems)} hook(s) above cannot be carried over with Claude Code's "
            "semantics; nothing was changed. Run again with --force to install anyway: "
            "they then stay in the settings file, where Claude Code keeps running them"
        )
        return 1
    if (problem := firebound.notice()) is not None:
        say(f"warning: {problem}")  # before anything changes (D382)
    client, notice = quickbuild.client(runner, home)
    if notice is not None:
        say(notice)
    moved = claudeinstall.install(settings, runner, ax_config, client, moved_to, force=True)
    say(f"{settings}: the runner is Claude Code's hook for every event it fires")
    say(f"{moved}: your hooks, run by the runner with their Claude Code semantics")
    for line in problems:
        say(f"{settings} {line}: left with Claude Code, which runs it itself")
    for event in claudeinstall.left_to_claude_code(document):
        say(f"{settings} $.hooks.{event}: not fired by the runner; Claude Code runs it as before")
    return 0


def _warm_up() -> None:
    """Open and close one session on files of its own, before the warm runner forks: what
    every call then builds the same way from its own inputs (the schemas' validators, the
    environment checks' compiled patterns) is built once and shared (D397). Nothing of it
    is kept for a call: each still reads its files and environment afresh."""
    import io
    import json
    import tempfile

    from sandbox_egress.hookrunner.ax.packs.catalogue import PACKS

    with tempfile.TemporaryDirectory(prefix="hookrunner-warm-") as directory:
        root = Path(directory)
        (root / "ws").mkdir()
        operator = root / "ax.json"
        operator.write_text(json.dumps({"packs": sorted(PACKS)}))
        moved = root / "moved.json"
        hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}
        moved.write_text(json.dumps({"hooks": {"PreToolUse": [hook]}}))
        session = AxSession(
            root / "ws",
            operator_config=operator,
            claude_settings=False,
            moved_settings=moved,
            claude_answers=True,
            metrics=HookMetrics(),
            stream=io.StringIO(),
            log_decisions=False,
        )
        session.close()


def _this_runner() -> str:
    """The console script beside this interpreter, else `hookrunner` on PATH."""
    beside = Path(sys.executable).parent / "hookrunner"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("hookrunner")
    if found is None:
        raise UsageError("no hookrunner command found: name it with --runner")
    return os.path.realpath(found)


def _close_stdout() -> None:
    """Give the caller its EOF now: fd 1 points at /dev/null from here on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run_fire(args: argparse.Namespace) -> int:
    args.claude_exit_codes = args.claude_exit_codes or args.claude_json
    if not args.claude_exit_codes:
        return _fire(args)
    blocks = AxEvent(args.event) in BLOCKING_EVENTS
    try:
        return _fire(args)
    except (HookRunnerError, ValueError, RecursionError) as exc:
        # Claude Code reads exit 2 as a block: a call that cannot be judged is blocked,
        # but only on an event that can block (exit 2 on Stop would keep the agent going).
        say(f"error: {exc}")
        return CLAUDE_BLOCK if blocks else 1
    except Exception as exc:
        say(f"internal error: {type(exc).__name__}: {exc}")
        return CLAUDE_BLOCK if blocks else 1


def _fire(args: argparse.Namespace) -> int:
    try:
        payload, refusal = read_stdin_json(empty_is_object=True), None
    except PayloadRefused as exc:  # beyond the bound: refused, not malformed
        payload, refusal = None, str(exc)
    # The boundary comes along for Claude Code's Bash (D380): told to the packs, applied
    # by the answer's updatedInput. Only as Claude Code's hook, which reads that answer.
    boundary = firebound.boundary_here(os.environ) if args.claude_exit_codes else ""
    session = AxSession(
        args.workspace,
        boundary=boundary,
        session_id=args.session_id,
        trust_project=True if args.trust_project_hooks else None,
        full_env=True if args.full_env else None,
        operator_config=args.ax_config,
        claude_settings=not args.claude_exit_codes,
        managed_settings=args.managed_settings,
        moved_settings=args.claude_hooks,
        interactive=args.interactive,
        claude_answers=args.claude_json,
        metrics=_metrics(),
        log_decisions=not args.claude_exit_codes,  # stderr is the reason Claude reads
    )
    try:
        result, output, inp = _judge(session, args.event, payload, refusal)
        answered = None
        if not args.claude_exit_codes:
            emit(result.to_json(output))
        elif (
            answered := _claude_answer(result, inp, boundary, session, args.claude_json)
        ) is not None:
            emit(answered)
        if AxEvent(args.event) in OBSERVATION_EVENTS:
            _close_stdout()
    finally:
        session.close(timeout=None)  # each queued hook still has its own deadline
    if args.claude_exit_codes:
        if result.allowed or answered is not None:
            return 0
        sys.stderr.write(f"{result.reason or f'Blocked by a {args.event} hook.'}\n")
        sys.stderr.flush()
        return CLAUDE_BLOCK
    return 0 if result.allowed else 1


def _claude_answer(
    result: FireResult,
    inp: EventInput | None,
    boundary: str,
    session: AxSession,
    as_json: bool = False,
) -> dict[str, Any] | None:
    """Claude Code's stdout document (``claude_json`` with ``--claude-json``, else
    ``claude_answer``), and for a Bash call it may run (allowed, or `ask`: the user's yes
    runs it) the command under the boundary (``updatedInput``), or the first call's word
    that there is none (D380, D382); the approvals bridge's ask or deny (``bridge``, D500)."""
    answer = (claude_json if as_json else claude_answer)(result)
    runs = result.allowed or result.decision is Verdict.ASK
    bridge = settings_from(os.environ)  # issue 47: the approvals bridge (D500)
    word = bridge_word(inp, bridge, boundary) if runs and inp and bridge else None
    if word is not None and word.decision == "deny":
        return with_bridge(answer, word, ())
    if not runs or inp is None or not firebound.wraps(inp):
        return with_bridge(answer, word, ()) if word is not None else answer
    if boundary:
        root = firebound.mask_root(session.workspace, os.environ)
        masks = (bridge.token_file,) if bridge is not None else ()
        answer = firebound.bounded_answer(answer, inp.claude_input, root, masks)
        if word is None or bridge is None:
            return answer
        return with_bridge(answer, word, grant_steps(word, bridge))
    if word is not None:  # no boundary: the ask names the host, no grant step (D503)
        answer = with_bridge(answer, word, ())
    said = firebound.first_notice(inp.session_id)
    if said is None:
        return answer
    sys.stderr.write(said + "\n")
    answer = dict(answer or {})
    answer["systemMessage"] = "\n".join(filter(None, [answer.get("systemMessage"), said]))
    return answer


def _judge(
    session: AxSession, event: str, payload: Any, refusal: str | None
) -> tuple[FireResult, str | None, EventInput | None]:
    """The event's result, the tool output its feedback follows and the parsed input; a
    payload beyond ``bounds`` (stdin, or what ``parse_event`` makes of it) is refused
    without a hook."""
    if refusal is None:
        try:
            inp = firebound.unwrapped(parse_event(event, payload, session_id=session.session_id))
        except PayloadRefused as exc:
            refusal = str(exc)
        else:
            return session.fire_input(inp), inp.output, inp
    return session.refused(AxEvent(event), refusal), None, None
