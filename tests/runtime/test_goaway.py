"""runtime/engine/goaway.py: an upstream's graceful GOAWAY lets the streams it names finish,
and a stream it did not process fails as `UNPROCESSED` (real layer classes and h2, the
upstream's frames written raw, no network; D701)."""

from __future__ import annotations

import struct
from typing import Any

import h2.config
import h2.connection
from mitmproxy.proxy import events
from mitmproxy.proxy.layers import http as http_layers

from sandbox_egress.proxy.failures import UNPROCESSED
from sandbox_egress.runtime.engine import goaway
from testbed.h2script import END_STREAM, RST_STREAM, SETTINGS, data, frame
from tests.runtime.goaway_support import Upstream, goaway_frame, patched, status_200, tctx

__all__ = ["patched", "tctx"]  # the fixtures, used by name

ENHANCE_YOUR_CALM, REFUSED_STREAM = 0xB, 7
ANSWER_AROUND_GOAWAY = status_200(1) + goaway_frame(1) + data(1, b"rest", END_STREAM)


def test_h2_and_mitmproxy_fail_the_stream_a_graceful_goaway_names(tctx: Any) -> None:
    """mitmproxy's own, with h2's: the GOAWAY names stream 1, which the upstream still
    answers. h2 closes its connection at the GOAWAY (python-hyper/h2#1181): the answer's
    next frame is a protocol error, which loses what came before it in the same read; a
    GOAWAY read alone fails the stream at once."""
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(ANSWER_AROUND_GOAWAY)
    assert upstream.outcome() == [("ResponseProtocolError", 1, "HTTP/2 protocol error: Invalid "
                                   "input ConnectionInputs.RECV_DATA in state ConnectionState.CLOSED")]  # fmt: skip
    assert upstream.closed
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(status_200(1))
    upstream.receive(goaway_frame(1))
    kinds = [kind for kind, _stream, _what in upstream.outcome()]
    assert kinds == ["ResponseHeaders", "ResponseProtocolError"]
    assert upstream.outcome()[1][2].startswith("HTTP/2 connection closed: <ConnectionTerminated")


def test_the_stream_a_graceful_goaway_names_finishes_then_the_connection_closes(
    tctx: Any, patched: None
) -> None:
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(ANSWER_AROUND_GOAWAY[: -len(data(1, b"rest", END_STREAM))])
    assert not upstream.closed and upstream.server in goaway._draining
    upstream.receive(data(1, b"rest", END_STREAM))
    assert upstream.outcome() == [
        ("ResponseHeaders", 1, None),
        ("ResponseData", 1, b"rest"),
        ("ResponseEndOfMessage", 1, None),
    ]
    assert upstream.closed  # its last stream ended: the proxy closes it
    in_one_read = Upstream(tctx)
    in_one_read.request(1)
    in_one_read.receive(ANSWER_AROUND_GOAWAY)
    assert (in_one_read.outcome(), in_one_read.closed) == (upstream.outcome(), True)


def test_a_stream_above_the_named_one_fails_as_unprocessed(tctx: Any, patched: None) -> None:
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.request(3)
    upstream.receive(goaway_frame(1))
    upstream.receive(status_200(1) + data(1, b"one", END_STREAM))
    assert upstream.outcome() == [
        ("ResponseProtocolError", 3, UNPROCESSED),
        ("ResponseHeaders", 1, None),
        ("ResponseData", 1, b"one"),
        ("ResponseEndOfMessage", 1, None),
    ]
    assert upstream.closed


def test_a_request_sent_after_the_goaway_fails_as_unprocessed_when_the_upstream_closes(
    tctx: Any, patched: None
) -> None:
    """A stream given the connection before the GOAWAY came, sent after it."""
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(goaway_frame(1))
    upstream.request(3)  # its HEADERS go out on h2 stream 3, which the upstream ignores
    upstream.receive(status_200(1))
    upstream.run(events.ConnectionClosed(upstream.server))
    errors = [(s, what) for kind, s, what in upstream.outcome() if kind.endswith("Error")]
    assert errors == [(3, UNPROCESSED), (1, "peer closed connection")]


def test_a_refused_stream_fails_as_unprocessed_and_goes_again_on_a_new_stream(
    tctx: Any, patched: None
) -> None:
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(frame(RST_STREAM, 0, 1, struct.pack(">I", REFUSED_STREAM)))
    assert upstream.outcome() == [("ResponseProtocolError", 1, UNPROCESSED)]
    upstream.request(1)  # the HTTP layer's stream 1 again: h2 stream 3 now
    upstream.receive(status_200(3) + data(3, b"again", END_STREAM))
    assert upstream.outcome()[1:] == [
        ("ResponseHeaders", 1, None),
        ("ResponseData", 1, b"again"),
        ("ResponseEndOfMessage", 1, None),
    ]
    assert not upstream.closed


def test_a_goaway_with_an_error_fails_every_stream_as_before(tctx: Any, patched: None) -> None:
    upstream = Upstream(tctx)
    upstream.request(1)
    upstream.receive(status_200(1) + goaway_frame(1, ENHANCE_YOUR_CALM))
    assert [kind for kind, _s, _w in upstream.outcome()] == [
        "ResponseHeaders",
        "ResponseProtocolError",
    ]
    assert upstream.closed and upstream.server not in goaway._draining


def test_a_draining_connection_is_not_given_to_a_new_request(tctx: Any, patched: None) -> None:
    upstream = Upstream(tctx)
    spec = http_layers.GetHttpConnection(
        upstream.server.address, upstream.server.tls, upstream.server.via
    )
    upstream.request(1)
    assert spec.connection_spec_matches(upstream.server)
    upstream.receive(goaway_frame(1))
    assert not spec.connection_spec_matches(upstream.server)


def test_a_server_side_connection_takes_a_goaway_as_h2_does(patched: None) -> None:
    """The sandbox's own GOAWAY to the proxy: h2 closes the connection, as before."""
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0))
    server.receive_data(goaway_frame(0))
    assert server.state_machine.state is h2.connection.ConnectionState.CLOSED
