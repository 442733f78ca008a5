"""Which failure an upstream exchange is, and how often stderr says it (proxy/failures.py)."""

from __future__ import annotations

import pytest

from sandbox_egress.proxy import failures
from sandbox_egress.proxy.decision import FAILURES, STATUS, Decision, Reason
from sandbox_egress.proxy.failures import QUIET_S, Quieted, classify


@pytest.mark.parametrize(
    ("kind", "message", "timed_out", "reason"),
    [
        ("CONNECT_FAILED", "[Errno 111] Connect call failed ('198.18.1.2', 81)", False,
         Reason.UPSTREAM_REFUSED),
        ("CONNECT_FAILED", "[Errno 113] No route to host", False, Reason.UPSTREAM_REFUSED),
        ("CONNECT_FAILED", "connect timed out after 2 s", False, Reason.UPSTREAM_TIMEOUT),
        ("GENERIC_SERVER_ERROR", "server closed connection", False, Reason.UPSTREAM_RESET),
        ("GENERIC_SERVER_ERROR", "unexpected server response: b'SSH-2.0'", False,
         Reason.UPSTREAM_RESET),
        ("CANCEL", "stream reset by server (CANCEL)", False, Reason.UPSTREAM_RESET),
        ("RESPONSE_VALIDATION_FAILED", "Received invalid header", False, Reason.UPSTREAM_RESET),
        ("GENERIC_SERVER_ERROR", "server closed connection", True, Reason.UPSTREAM_TIMEOUT),
    ],
    ids=["refused", "no-route", "connect-timeout", "closed", "not-http", "h2-reset",
         "invalid-head", "answer-timeout"],
)  # fmt: skip
def test_classify(kind: str, message: str, timed_out: bool, reason: Reason) -> None:
    assert classify(kind, message, timed_out) is reason


def test_failures_are_gateway_statuses_and_egress_failed() -> None:
    assert {r: Decision.deny(r).status for r in FAILURES} == {
        Reason.DNS_FAILURE: 502,
        Reason.UPSTREAM_TLS: 502,
        Reason.CREDENTIAL_UNAVAILABLE: 502,
        Reason.UPSTREAM_REFUSED: 502,
        Reason.UPSTREAM_RESET: 502,
        Reason.UPSTREAM_TIMEOUT: 504,
    }
    assert all(STATUS.get(r) in (502, 504) for r in FAILURES)


def test_one_line_per_host_and_reason_per_interval() -> None:
    quiet = Quieted()
    assert quiet.say("a.test", Reason.UPSTREAM_RESET, 100.0) == 0
    assert quiet.say("a.test", Reason.UPSTREAM_RESET, 101.0) is None
    assert quiet.say("a.test", Reason.UPSTREAM_RESET, 102.0) is None
    assert quiet.say("a.test", Reason.UPSTREAM_REFUSED, 102.0) == 0  # another reason
    assert quiet.say("b.test", Reason.UPSTREAM_RESET, 102.0) == 0  # another host
    assert quiet.say("a.test", Reason.UPSTREAM_RESET, 100.0 + QUIET_S) == 2  # two unsaid


def test_the_hosts_remembered_are_bounded() -> None:
    quiet = Quieted(keys=3)
    for n in range(10):
        assert quiet.say(f"h{n}.test", Reason.UPSTREAM_RESET, 1.0) == 0
    assert len(quiet._last) == 3
    assert quiet.say("h0.test", Reason.UPSTREAM_RESET, 1.5) == 0  # forgotten: said again


LOST = failures.CLOSED_UNANSWERED
UNPROCESSED = failures.UNPROCESSED
SEND_AGAIN = {"reused": True, "held": True, "again": False, "timed_out": False}


@pytest.mark.parametrize(
    ("method", "message", "change", "expected"),
    [
        ("GET", LOST, {}, True),
        ("HEAD", LOST, {}, True),
        ("OPTIONS", LOST, {}, True),
        ("POST", LOST, {}, False),  # not safe: the upstream may have acted on it
        ("PUT", LOST, {}, False),  # idempotent, not safe: left to the client
        ("DELETE", LOST, {}, False),
        ("get", LOST, {}, False),  # methods are compared exactly
        ("GET", "unexpected server response: b'x'", {}, False),  # an answer byte came
        ("GET", "Connection reset by peer", {}, False),  # not mitmproxy's words for one (D684)
        ("GET", LOST, {"reused": False}, False),  # opened for this request: not the race
        ("GET", LOST, {"held": False}, False),  # a body streamed on: not held to send again
        ("GET", LOST, {"again": True}, False),  # once
        ("GET", LOST, {"timed_out": True}, False),  # the proxy's own deadline closed it
        ("GET", LOST, {"names": ("Host", "Accept")}, True),
        ("GET", LOST, {"names": ("X-HTTP-Method-Override",)}, False),  # D682: maybe a DELETE
        ("GET", LOST, {"names": ("x-http-method",)}, False),
        ("HEAD", LOST, {"names": ("X-Method-Override",)}, False),
        # D701: an HTTP/2 upstream said it did not process it: any method, a body too,
        # if the proxy holds the whole request as it went out; once; not after its deadline
        ("POST", UNPROCESSED, {"whole": True, "reused": False, "held": False}, True),
        ("DELETE", UNPROCESSED, {"whole": True, "names": ("X-HTTP-Method-Override",)}, True),
        ("GET", UNPROCESSED, {}, False),  # `whole` not said: a streamed body is not kept
        ("POST", UNPROCESSED, {"whole": False}, False),
        ("POST", UNPROCESSED, {"whole": True, "again": True}, False),
        ("GET", UNPROCESSED, {"whole": True, "timed_out": True}, False),
        ("POST", LOST, {"whole": True}, False),  # a closed connection: D680's rule alone
    ],
)
def test_send_again(method: str, message: str, change: dict[str, object], expected: bool) -> None:
    assert failures.send_again(method, message, **{**SEND_AGAIN, **change}) is expected  # type: ignore[arg-type]
