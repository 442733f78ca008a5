"""The attack round on runtime/engine/goaway.py (D710-D711), at the layer: real `Http2Client`
and h2, the upstream's frames written raw (tests/runtime/goaway_support.py's harness)."""

from __future__ import annotations

import struct
from typing import Any

import h2.connection

from sandbox_egress.proxy.failures import UNPROCESSED
from sandbox_egress.runtime.engine import goaway
from testbed.h2script import END_STREAM, SETTINGS, data, frame
from tests.runtime.goaway_support import Upstream, goaway_frame, patched, status_200, tctx

__all__ = ["patched", "tctx"]  # the fixtures, used by name

INTERNAL_ERROR = 0x2
MAX_CONCURRENT_STREAMS = 0x3


def one_stream_at_a_time() -> bytes:
    return frame(SETTINGS, 0, 0, struct.pack(">HI", MAX_CONCURRENT_STREAMS, 1))


def test_requests_queued_behind_the_stream_limit_fail_as_unprocessed_at_the_goaway(
    tctx: Any, patched: None
) -> None:
    """D710: never sent on the drained connection (mitmproxy would send them as its
    streams end, above the named stream: the upstream ignores them)."""
    upstream = Upstream(tctx)
    upstream.receive(one_stream_at_a_time())
    upstream.request(1)
    upstream.request(3)  # queued: one stream at a time
    upstream.request(5)
    assert sorted(upstream.client.stream_queue) == [3, 5]
    upstream.receive(goaway_frame(1))
    assert upstream.outcome() == [
        ("ResponseProtocolError", 3, UNPROCESSED),
        ("ResponseProtocolError", 5, UNPROCESSED),
    ]
    upstream.receive(status_200(1) + data(1, b"one", END_STREAM))
    assert upstream.outcome()[2:] == [
        ("ResponseHeaders", 1, None),
        ("ResponseData", 1, b"one"),
        ("ResponseEndOfMessage", 1, None),
    ]
    assert upstream.client.h2_conn.highest_outbound_stream_id == 1  # nothing else went out
    assert upstream.closed


def test_the_queue_fails_in_the_read_of_a_goaway_that_ends_the_last_stream(
    tctx: Any, patched: None
) -> None:
    upstream = Upstream(tctx)
    upstream.receive(one_stream_at_a_time())
    upstream.request(1)
    upstream.request(3)
    upstream.receive(status_200(1) + goaway_frame(1) + data(1, b"one", END_STREAM))
    assert upstream.outcome() == [
        ("ResponseHeaders", 1, None),
        ("ResponseData", 1, b"one"),
        ("ResponseEndOfMessage", 1, None),
        ("ResponseProtocolError", 3, UNPROCESSED),
    ]
    assert upstream.client.h2_conn.highest_outbound_stream_id == 1
    assert upstream.closed


def test_an_error_goaway_after_a_graceful_one_fails_every_stream_left(
    tctx: Any, patched: None
) -> None:
    """D711: mitmproxy's, as for an error GOAWAY alone."""
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(goaway_frame(1))
    assert not upstream.closed
    upstream.receive(goaway_frame(1, INTERNAL_ERROR))
    (kind, stream, what), *rest = upstream.outcome()
    assert (kind, stream, rest) == ("ResponseProtocolError", 1, [])
    assert what.startswith("HTTP/2 connection closed: <ConnectionTerminated error_code:2")
    assert upstream.closed


def test_a_later_goaway_may_lower_the_named_stream_never_raise_it(tctx: Any, patched: None) -> None:
    upstream = Upstream(tctx)
    for stream in (1, 3, 5):
        upstream.request(stream)
    upstream.receive(goaway_frame(3))
    upstream.receive(goaway_frame(5))  # going up (RFC 9113 6.8: must not): ignored
    assert upstream.client.h2_conn.__dict__[goaway.LAST] == 3
    upstream.receive(goaway_frame(1))  # going down: stream 3 was not processed
    assert upstream.outcome() == [
        ("ResponseProtocolError", 5, UNPROCESSED),
        ("ResponseProtocolError", 3, UNPROCESSED),
    ]
    assert not upstream.closed  # stream 1 is still answered
    assert isinstance(upstream.client.h2_conn, h2.connection.H2Connection)
