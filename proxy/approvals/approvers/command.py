"""The `command` approver: a program asked with the approval's JSON on stdin, answering
`{"decision", "scope", "reason"}` on stdout (docs/configuration.md#approvals).

It runs through `common.process.run_process` (its own session and process group, SIGTERM
then SIGKILL at the deadline, output read with a cap while it runs, always reaped), on a
thread so the event loop never waits on it. A crash, a non-zero exit, a hang, output over
`OUTPUT_CAP` or anything but one JSON answer is no answer (None): the next approver is
asked (D483). The program gets a minimal environment (`PATH` only) and `/` as its
directory: the proxy's own environment may hold secrets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox_egress.common.process import run_process
from sandbox_egress.proxy.approvals.approvers.base import Answer, Approver, Report, answer_of
from sandbox_egress.proxy.approvals.scopes import duration_s

OUTPUT_CAP = 64 * 1024
DEFAULT_TIMEOUT_S = 10.0
ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin"}

log = logging.getLogger("sandbox_egress.approvals")


@dataclass(frozen=True, slots=True)
class CommandApprover:
    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    kind: str = "command"

    async def ask(self, approval: Mapping[str, Any]) -> Answer | None:
        payload = json.dumps(dict(approval)).encode()
        result = await asyncio.to_thread(
            run_process,
            self.argv,
            stdin=payload,
            cwd="/",
            env=ENVIRONMENT,
            timeout=self.timeout_s,
            cap=OUTPUT_CAP,
        )
        if result.spawn_error or result.timed_out or result.returncode != 0:
            why = result.spawn_error or ("timed out" if result.timed_out else "exit status")
            log.warning("approver %s gave no answer (%s %s)", self.argv[0], why, result.returncode)
            return None
        if result.stdout_truncated:
            log.warning("approver %s gave no answer (output over the cap)", self.argv[0])
            return None
        try:
            answer = answer_of(json.loads(result.stdout))
        except (ValueError, UnicodeDecodeError):
            answer = None
        if answer is None:
            log.warning("approver %s gave no answer (unreadable output)", self.argv[0])
        return answer


class _Kind:
    def parse(
        self, item: dict[str, Any], where: str, report: Report, environ: Mapping[str, str] | None
    ) -> Approver | None:
        argv = item.get("command")
        if (
            not isinstance(argv, list)
            or not argv
            or not all(isinstance(a, str) and a and "\0" not in a for a in argv)
        ):
            report(f"{where}.command", "expected a non-empty list of strings (argv, no shell)")
            return None
        for key in item:
            if key not in ("command", "timeout"):
                report(f"{where}.{key}", "unknown key (expected: command, timeout)")
        timeout = duration_s(item.get("timeout", "10s"), 1, 300)
        if timeout is None:
            report(f"{where}.timeout", "expected a duration from 1s to 5m")
            return None
        return CommandApprover(tuple(argv), timeout)


KIND = _Kind()
