"""When the proxy fails rather than refuses: which reason, and how often it is said
(docs/configuration.md#when-the-proxy-fails, D352-D354).

`classify` names the failure of an allowed request's upstream from what the engine
reports about it: the kind of protocol error (`ErrorKind`, the engine's error code by
name) and its message. An upstream that refused or could not take the connection is
`upstream_refused`, one that took it and then closed, reset or broke the exchange
before a complete answer head is `upstream_reset`, one that did not connect or begin
its answer in time is `upstream_timeout`. TLS (`upstream_tls`), names (`dns_failure`)
and credentials (`credential_unavailable`) are decided where they happen.

`send_again` says whether a request lost with its kept-alive connection goes once more
on a new one (D680): only a safe method as sent (RFC 9110 9.2.1; it changes nothing, so the
upstream may see it twice) without a method override field (D682), whose whole request the
proxy holds, lost on a connection that had answered before (D683) and closed (or reset,
D684) before any byte of an answer; once. And any request, body included, whose whole
request the proxy holds, that an HTTP/2 upstream said it never processed (`UNPROCESSED`:
above the last stream of its GOAWAY, or refused with `REFUSED_STREAM`; RFC 9113 8.7, D701);
once.

`Quieted` bounds the operator's stderr: one line per (host, reason) per
`QUIET_S`, the next one saying how many were left unsaid; at most `QUIET_KEYS` keys
are remembered (a sandbox cycling through host names cannot grow it).

Pure: no mitmproxy import; the adapter is `addons.upstream`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.fields import METHOD_OVERRIDES

QUIET_S = 10.0  # one stderr line per (host, reason) this often
QUIET_KEYS = 1024
TIMED_OUT = "timed out"  # in the message of a connect the proxy gave up on

# The engine's error codes (mitmproxy's `ErrorCode` by name) that mean the connection
# to the upstream was never made.
CONNECT_FAILED = "CONNECT_FAILED"
# What mitmproxy's HTTP/1 client reports when the upstream closed before an answer byte.
CLOSED_UNANSWERED = "server closed connection"
# What runtime/engine/goaway.py reports for a stream an HTTP/2 upstream never processed.
UNPROCESSED = "The upstream did not process the request (HTTP/2 GOAWAY or REFUSED_STREAM)."
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Why a request went once more, and how it ended: the labels of
# `egress_upstream_sent_again_total` (`closed`: a kept-alive connection lost it, D680;
# `unprocessed`: an HTTP/2 upstream did not process it, D701).
AGAIN_CLOSED, AGAIN_UNPROCESSED = "closed", "unprocessed"
SENT_AGAIN_CAUSES = (AGAIN_CLOSED, AGAIN_UNPROCESSED)
SENT_AGAIN_OUTCOMES = ("answered", "failed")


def classify(kind: str, message: str, timed_out: bool = False) -> Reason:
    """The failure of an upstream exchange that ended before its answer head."""
    if timed_out or (kind == CONNECT_FAILED and TIMED_OUT in message.lower()):
        return Reason.UPSTREAM_TIMEOUT
    if kind == CONNECT_FAILED:
        return Reason.UPSTREAM_REFUSED
    return Reason.UPSTREAM_RESET


def send_again(
    method: str,
    message: str,
    *,
    reused: bool,
    held: bool,
    again: bool,
    timed_out: bool,
    names: Iterable[str] = (),
    whole: bool = False,
) -> bool:
    """Whether a request whose upstream failed with `message` goes once more, on a new
    connection: `method` as the upstream receives it (case-sensitive, RFC 9110 9.1: `get`
    is not `GET`, D681); `reused`, its connection had answered a request before (open is
    not enough: the first request on a connection opened ahead of it is not sent twice,
    D683); `held`, the proxy holds its whole request (not streamed); `again`, it already
    went twice; `timed_out`, the proxy itself closed the connection (its answer deadline,
    D353); `names`, its header field names (a method override is not sent twice, D682);
    `whole`, the proxy holds the whole request as it went out, body included (D701)."""
    if message == UNPROCESSED:  # the upstream says it did nothing with it: any method
        return whole and not (again or timed_out)
    return (
        message == CLOSED_UNANSWERED
        and method in SAFE_METHODS
        and not any(name.lower() in METHOD_OVERRIDES for name in names)
        and reused
        and held
        and not (again or timed_out)
    )


def again_cause(message: str) -> str:
    """The cause label of a request `send_again` let go once more, from its failure."""
    return AGAIN_UNPROCESSED if message == UNPROCESSED else AGAIN_CLOSED


class Quieted:
    """Which failures to say on stderr: the first of each (host, reason) per `QUIET_S`."""

    def __init__(self, interval: float = QUIET_S, keys: int = QUIET_KEYS) -> None:
        self._interval = interval
        self._keys = keys
        self._last: OrderedDict[tuple[str, Reason], tuple[float, int]] = OrderedDict()

    def say(self, host: str, reason: Reason, now: float) -> int | None:
        """None: stay quiet (counted); otherwise say it, with how many went unsaid."""
        key = (host, reason)
        last = self._last.get(key)
        if last is not None and now - last[0] < self._interval:
            self._last[key] = (last[0], last[1] + 1)
            return None
        self._last[key] = (now, 0)
        self._last.move_to_end(key)
        while len(self._last) > self._keys:
            self._last.popitem(last=False)
        return last[1] if last is not None else 0
