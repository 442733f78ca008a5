"""A hooks.json handler's run to its ``Outcome`` (pure): the kernel's, then the output's.

The mechanism's outcome comes first (``outcome.classify_process`` /
``classify_http``). Only an ``ok`` run of a pre handler (exit status 0, a 2xx
answer) has its output parsed exactly (``decision.parse_decision``); a post
handler's output is never interpreted. A pre command that exits non-zero but
printed something that looks like a deny is reported as such (it still allows).
"""

from __future__ import annotations

from sandbox_egress.common.process import ProcessResult
from sandbox_egress.hookrunner.decision import near_miss_in_output, parse_decision
from sandbox_egress.hookrunner.httpclient import HttpResult
from sandbox_egress.hookrunner.model import Event
from sandbox_egress.hookrunner.outcome import Classified, Outcome, classify_http, classify_process

__all__ = ["Classified", "decode_http", "decode_process"]


def decode_process(event: Event, result: ProcessResult, timeout: float) -> Classified:
    classified = classify_process(result, timeout)
    if classified.outcome in (Outcome.EXIT_NONZERO, Outcome.NOT_FOUND, Outcome.NOT_EXECUTABLE):
        near = near_miss_in_output(result.stdout) if event is Event.PRE else None
        if near is None:
            return classified
        detail = f"{classified.detail}; {near} but a non-zero exit status never denies"
        return Classified(classified.outcome, detail, near_miss=near)
    if classified.outcome is not Outcome.OK or event is Event.POST:
        return classified
    parsed = parse_decision(result.stdout, truncated=result.stdout_truncated)
    return Classified(parsed.outcome, parsed.detail, parsed.reason, parsed.near_miss)


def decode_http(event: Event, result: HttpResult) -> Classified:
    classified = classify_http(result)
    if classified.outcome is not Outcome.OK or event is Event.POST:
        return classified
    parsed = parse_decision(result.body, truncated=result.truncated)
    return Classified(parsed.outcome, parsed.detail, parsed.reason, parsed.near_miss)
