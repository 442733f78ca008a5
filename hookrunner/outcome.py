"""The kernel's outcome types: what one hook run came to, in every dialect (pure).

``Outcome`` is the one closed set of results of a single handler run, whichever
dialect ran it; it is the ``outcome`` label of ``hook_runs_total`` and is
documented in docs/hooks.md. ``FAILURES`` is the one set of outcomes that are
failures (worth a warning line, counted apart from the answers). An outcome is
either a failure or an answer the hook gave on purpose: ``allow``, ``deny``,
``ok``, and in the AX Code dialect ``ask`` and ``exit_2`` (Claude Code's way
to block). ``MECHANISM_FAILURES`` names which failures each mechanism itself
can produce; every one of them is in ``FAILURES``.

``classify_process`` and ``classify_http`` turn what a mechanism returned into
an outcome, in this order. For a command: spawn error, then timeout, then death
by signal, then the exit status (127 not found, 126 not executable, other
non-zero), and exit status 0 is ``ok``. For an http handler: timeout / TLS /
proxy refusal / network failure, then a non-2xx status, and a 2xx answer is
``ok``. What an ``ok`` run printed is the dialect's to decode. Failure details
carry at most a short, single-line excerpt of stderr (the reporter redacts
secrets in it).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from sandbox_egress.common.process import ProcessResult
from sandbox_egress.hookrunner.httpclient import HttpFailure, HttpResult


class HandlerType(StrEnum):
    """The mechanism that runs a handler (the ``type`` label)."""

    COMMAND = "command"
    HTTP = "http"


class Outcome(StrEnum):
    # Answers: a hook said this on purpose.
    ALLOW = "allow"  # hooks.json pre: {"decision": "allow"}; claude-code: allow / approve
    DENY = "deny"  # hooks.json pre: exactly {"decision": "deny"}; claude-code: deny, block...
    OK = "ok"  # exit status 0 / a 2xx response, nothing decided
    ASK = "ask"  # claude-code: permissionDecision "ask"
    EXIT_2 = "exit_2"  # claude-code: exit status 2 (Claude Code's deliberate block)
    # Failures of the output (the mechanism worked; what it printed is not an answer):
    EMPTY_OUTPUT = "empty_output"  # hooks.json pre: nothing but whitespace
    UNRECOGNISED = "unrecognised"  # hooks.json pre: valid JSON that is not a decision object
    UNPARSEABLE = "unparseable"  # hooks.json pre: not JSON, not UTF-8, duplicate keys...
    NEAR_MISS = "near_miss"  # hooks.json pre: looks like a deny but is not exactly one
    TRUNCATED = "truncated"  # hooks.json pre: output above the 1 MiB cap
    MALFORMED = "malformed"  # claude-code: exit 0 with stdout that is not a valid answer
    # Failures of the mechanism:
    EXIT_NONZERO = "exit_nonzero"  # the command exited with a status other than 0, 126, 127
    NOT_FOUND = "not_found"  # exit status 127: the shell did not find the program
    NOT_EXECUTABLE = "not_executable"  # exit status 126: found but not executable
    CRASHED = "crashed"  # the command was killed by a signal it did not get from us
    TIMEOUT = "timeout"  # the deadline passed; the process group was killed
    SPAWN_ERROR = "spawn_error"  # the shell could not be started at all
    CANCELLED = "cancelled"  # stopped because its session closed (AX observation hooks)
    HTTP_ERROR = "http_error"  # a non-2xx status (3xx included: redirects are not followed)
    NETWORK_ERROR = "network_error"  # DNS, refused, reset, malformed response
    TLS_ERROR = "tls_error"  # certificate not trusted, handshake failed, CA file unusable
    PROXY_REFUSED = "proxy_refused"  # the egress proxy answered the CONNECT with non-2xx
    PROXY_UNUSABLE = "proxy_unusable"  # HTTPS_PROXY cannot be used (reported at session start)

    @property
    def failed(self) -> bool:
        return self in FAILURES


ANSWERS = frozenset({Outcome.ALLOW, Outcome.DENY, Outcome.OK, Outcome.ASK, Outcome.EXIT_2})
FAILURES = frozenset(Outcome) - ANSWERS
MECHANISM_FAILURES: Mapping[HandlerType, frozenset[Outcome]] = {
    HandlerType.COMMAND: frozenset(
        {
            Outcome.EXIT_NONZERO,
            Outcome.NOT_FOUND,
            Outcome.NOT_EXECUTABLE,
            Outcome.CRASHED,
            Outcome.TIMEOUT,
            Outcome.SPAWN_ERROR,
        }
    ),
    HandlerType.HTTP: frozenset(
        {
            Outcome.TIMEOUT,
            Outcome.HTTP_ERROR,
            Outcome.NETWORK_ERROR,
            Outcome.TLS_ERROR,
            Outcome.PROXY_REFUSED,
            Outcome.PROXY_UNUSABLE,
        }
    ),
}

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
    """What a handler's run came to: an outcome, its detail, and a deny's reason (the one
    type of a classified process, HTTP answer and parsed decision output)."""

    outcome: Outcome
    detail: str
    reason: str | None = None
    near_miss: str | None = None


def classify_process(result: ProcessResult, timeout: float) -> Classified:
    """The mechanism's outcome of a finished command: ``ok`` for exit status 0."""
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
        return Classified(outcome, f"exited with status {code}{_stderr(result)}")
    return Classified(Outcome.OK, "exited with status 0")


def classify_http(result: HttpResult) -> Classified:
    """The mechanism's outcome of an http POST: ``ok`` for a 2xx status."""
    if result.failure is not None:
        return Classified(_HTTP_FAILURES[result.failure], result.detail)
    status = result.status or 0
    if not 200 <= status < 300:
        detail = f"answered HTTP {status}"
        if 300 <= status < 400:
            detail += f"; the redirect{_location(result.location)} was not followed"
        return Classified(Outcome.HTTP_ERROR, detail)
    return Classified(Outcome.OK, f"answered HTTP {status}")


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
