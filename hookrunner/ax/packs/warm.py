"""Packs run inside the warm runner's call, no process of their own (issue 44, D396).

A pack entry's command starts ``python -I -S`` and imports the shell grammar on every
call (~100-150 ms, most of a call's cost before issue 44). The warm runner (``claude
serve``) imports the packs once (``enable``) before it forks a child per call; in that
child (a process that lives for one call and is never reused) each pack entry
(``applies``) runs as a function call: ``packs.main``'s handler on the same input a pack
process gets — the arguments on stdin, the hook environment (``HOOK_*``,
``HOOK_BOUNDARY``), the workspace — with the same kind of result (``ProcessResult``:
exit status, stdout and stderr capped, the deadline). The decision is the pack's own,
decoded as before: exit 2 blocks with stderr, an exception is exit 1 (which
``blockOnFailure`` turns into a block), and so is the deadline (``SIGALRM`` interrupts
the pack; its entry then fails closed as a timed-out process would).

Invariants: only on the main thread of a process that ``enable``d it (the call's child;
elsewhere the pack is a process as before); stdout and stderr are the pack's own
(redirected for the call, restored after); ``format-after-edit`` stays a process (it
runs formatters, as another user where configured), as does any entry whose command is
not exactly the pack's own. A fork per pack was measured first and cost 30 ms a fork of
the warm runner's heap on this machine: a call is cheaper.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import threading
import time
from types import FrameType

from sandbox_egress.hookrunner.enforce.command import OUTPUT_CAP, ProcessResult

IN_PROCESS = frozenset(
    {"block-force-push", "protect-env-files", "log-bash-commands", "require-tests-on-stop"}
)
_enabled: list[bool] = []


class _Deadline(BaseException):
    """The pack ran past its entry's timeout (not an Exception: no pack code catches it)."""


def enable() -> None:
    """Import what the packs import (the warm runner does it once, before it forks)."""
    from sandbox_egress.hookrunner.ax.packs import (  # noqa: F401 - imported to be shared
        envfiles,
        grammar,
        judge,
        main,
        testruns,
    )
    from sandbox_egress.hookrunner.ax.packs.catalogue import grammar_paths

    grammar_paths()  # its cache, shared with every call
    _enabled[:] = [True]


def applies(pack: str, command: str) -> bool:
    from sandbox_egress.hookrunner.ax.packs.catalogue import pack_command

    return (
        bool(_enabled)
        and pack in IN_PROCESS
        and threading.current_thread() is threading.main_thread()
        and command == pack_command(pack)
    )


def run(pack: str, *, stdin: bytes, cwd: str, env: dict[str, str], timeout: float) -> ProcessResult:
    from sandbox_egress.hookrunner.ax.packs.main import HANDLERS, Context

    started = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    timed_out = False

    def expire(signum: int, frame: FrameType | None) -> None:
        raise _Deadline

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                args = json.loads(stdin) if stdin.strip() else {}
                if not isinstance(args, dict):
                    raise ValueError("the arguments on stdin are not a JSON object")
                context = Context(
                    env.get("HOOK_EVENT", ""),
                    env.get("HOOK_TOOL", ""),
                    env.get("HOOK_SESSION_ID", ""),
                    args,
                    cwd,
                    env,
                )
                code = HANDLERS[pack](context)
            except Exception as exc:  # as packs.main: exit 1, which blockOnFailure blocks
                err.write(
                    f"{pack}: internal error ({type(exc).__name__}: {exc}); nothing checked\n"
                )
                code = 1
    except _Deadline:
        timed_out, code = True, -signal.SIGKILL
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    stdout = out.getvalue().encode("utf-8", errors="replace")
    stderr = err.getvalue().encode("utf-8", errors="replace")
    return ProcessResult(
        code,
        stdout[:OUTPUT_CAP],
        stderr[:OUTPUT_CAP],
        len(stdout) > OUTPUT_CAP,
        len(stderr) > OUTPUT_CAP,
        timed_out,
        time.monotonic() - started,
    )
