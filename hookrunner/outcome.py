"""From what a mechanism returned to the handler run's ``Outcome`` (pure).

For a command: spawn error, then timeout, then death by signal, then the exit
status (127 not found, 126 not executable, other non-zero), and only for exit
status 0 of a pre handler, the exact parsing of stdout. For an http handler:
timeout / TLS / proxy refusal / network failure, then a non-2xx status, and
only for a 2xx answer to a pre event, the exact parsing of the body. A post
handler's output is never interpreted. Failure details carry at most a short,
single-line excerpt of stderr (the reporter redacts secrets in it).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from urllib.parse import urlsplit

from hookrunner.command import ProcessResult
from hookrunner.decision import near_miss_in_output, parse_decision
from hookrunner.httpclient import HttpFailure, HttpResult
from hookrunner.model import Event, Outcome

_EXCERPT_CHARS = 200
_HTTP_FAILURES = {
    HttpFailure.TIMEOUT: Outcome.TIMEOUT,
    HttpFailure.NETWORK: Outcome.NETWORK_ERROR,
    HttpFailure.TLS: Outcome.TLS_ERROR,
    HttpFailure.PROXY_REFUSED: Outcome.PROXY_REFUSED,
    HttpFailure.PROXY_UNUSABLE: Outcome.PROXY_UNUSABLE,
}


@dataclass(frozen=True)
class Classified:
    outcome: Outcome
    detail: str
    reason: str | None = None
    near_miss: str | None = None


def classify_process(event: Event, result: ProcessResult, timeout: float) -> Classified:
    if result.spawn_error is not None:
        return Classified(Outcome.SPAWN_ERROR, f"could not start the shell: {result.spawn_error}")
    if result.timed_out:
        return Classified(
            Outcome.TIMEOUT, f"did not finish within {timeout:g} s; its process group was killed"
        )
    code = result.returncode
    if code is None:  # not reaped within a second of SIGKILL (uninterruptible sleep)
        return Classified(Outcome.CRASHED, "did not die after SIGKILL")
    if code < 0:
        return Classified(Outcome.CRASHED, f"killed by {_signal_name(-code)}{_stderr(result)}")
    if code != 0:
        outcome = {127: Outcome.NOT_FOUND, 126: Outcome.NOT_EXECUTABLE}.get(
            code, Outcome.EXIT_NONZERO
        )
        detail = f"exited with status {code}{_stderr(result)}"
        near = near_miss_in_output(result.stdout) if event is Event.PRE else None
        if near is not None:
            detail += f"; {near} but a non-zero exit status never denies"
        return Classified(outcome, detail, near_miss=near)
    if event is Event.POST:
        return Classified(Outcome.OK, "exited with status 0")
    parsed = parse_decision(result.stdout, truncated=result.stdout_truncated)
    return Classified(parsed.outcome, parsed.detail, parsed.reason, parsed.near_miss)


def classify_http(event: Event, result: HttpResult) -> Classified:
    if result.failure is not None:
        return Classified(_HTTP_FAILURES[result.failure], result.detail)
    status = result.status or 0
    if not 200 <= status < 300:
        detail = f"answered HTTP {status}"
        if 300 <= status < 400:
            detail += f"; the redirect{_location(result.location)} was not followed"
        return Classified(Outcome.HTTP_ERROR, detail)
    if event is Event.POST:
        return Classified(Outcome.OK, f"answered HTTP {status}")
    parsed = parse_decision(result.body, truncated=result.truncated)
    return Classified(parsed.outcome, parsed.detail, parsed.reason, parsed.near_miss)


def _stderr(result: ProcessResult) -> str:
    text = result.stderr.decode("utf-8", errors="replace").strip()
    if not text:
        return ""
    first = text.splitlines()[0]
    if len(first) > _EXCERPT_CHARS:
        first = first[: _EXCERPT_CHARS - 1] + "\u2026"
    return f" (stderr: {first!r})"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _location(location: str | None) -> str:
    """Scheme and host only: a redirect's path or query may carry tokens."""
    if not location:
        return ""
    try:
        parts = urlsplit(location)
    except ValueError:
        return ""
    if parts.scheme and parts.netloc:
        return f" to {parts.scheme}://{parts.hostname or ''}"
    return " (relative)"
