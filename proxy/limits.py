"""The proxy's memory bounds: how much of a head, a message or a buffered body it may hold.

Plain values, no mitmproxy: `addons.layers.limits` enforces them on the protocol layers and
`runtime.launcher` passes `STREAM_BODIES_OVER` to mitmproxy. The reasons for each number
are in docs/decisions.md (D25-D29).

Invariants:
* Every byte the proxy holds on behalf of one connection is bounded by one of these
  numbers plus one socket read (64 KiB): a head (request, response or trailer block) by
  `HEAD_LIMIT`, a WebSocket message by `WEBSOCKET_MESSAGE_LIMIT`, a buffered body by
  `STREAM_BODIES_OVER` (larger bodies are streamed, never held), what waits for an
  HTTP/2 client's window by `H2_CLIENT_QUEUE_LIMIT`.
* `Limit` is the closed set of metric label values for refusals by a bound.
"""

from __future__ import annotations

import enum

# Request and response heads, and HTTP/1 trailer blocks: the same 64 KiB that the h2
# library allows for an HTTP/2 header list (hpack's default max_header_list_size).
HEAD_LIMIT = 64 * 1024
# A request head must be complete this long after its first byte (checked as bytes arrive
# and by a timer; a connection that sends nothing at all is closed by mitmproxy's tcp_timeout).
HEAD_TIMEOUT_S = 30.0
# One WebSocket message is held whole by mitmproxy (for its message hook) until it ends.
WEBSOCKET_MESSAGE_LIMIT = 16 * 1024 * 1024
# DATA queued for an HTTP/2 client beyond its flow-control window; past this the proxy
# stops reading the upstreams of that client until half of it has drained.
H2_CLIENT_QUEUE_LIMIT = 2 * 1024 * 1024
# mitmproxy's `stream_large_bodies`: a body it would otherwise buffer is streamed past this.
STREAM_BODIES_OVER = "1m"


class Limit(enum.StrEnum):
    """Which bound refused something (`egress_limit_refusals_total{limit}`)."""

    REQUEST_HEAD = "request_head"
    RESPONSE_HEAD = "response_head"
    REQUEST_HEAD_TIMEOUT = "request_head_timeout"
    WEBSOCKET_MESSAGE = "websocket_message"
    REFUSED_BODY = "refused_body"


def head_refusal_body(limit: Limit) -> dict[str, str]:
    """The JSON body of a refused request head (the shape of every refusal,
    docs/configuration.md#reason-codes)."""
    message = (
        f"request head not complete within {HEAD_TIMEOUT_S:g} s"
        if limit is Limit.REQUEST_HEAD_TIMEOUT
        else f"request head larger than {HEAD_LIMIT} bytes"
    )
    return {"error": "egress_denied", "reason": "bad_request", "message": message, "host": ""}
