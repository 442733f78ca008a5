"""Empty lines before a request line are skipped before mitmproxy picks a layer (RFC 9112
2.2; docs/decisions.md D336).

What it replaces: nothing is replaced; `skip_empty_lines` edits the client data a
`mitmproxy.proxy.layer.NextLayer` holds before mitmproxy 12's `NextLayer` addon
(`addons/next_layer.py`) looks at it. Why: step 5d of that addon takes client bytes whose
first three are not letters for raw TCP, so `\\r\\nPOST /mcp HTTP/1.1` in a plain
tunnel, in transparent mode, or inside intercepted TLS without ALPN became a raw TCP
flow — while nginx and Node read the same bytes as one HTTP request. And its HTTP/1
reader (h11's `ReceiveBuffer`) drops one empty line per read and then waits for more
bytes, so such a request would hang. With the empty lines removed from the held events
the layer is chosen on the request line, and the HTTP layer reads the request whole:
it is judged like any other. The test that fails when mitmproxy changes under it:
tests/e2e/test_mcp_spellings_e2e.py::test_an_allowed_request_after_an_empty_line_arrives_as_http.

Invariants: only TCP connections, only CR and LF bytes, only before the client's first
other byte; while nothing else has arrived the decision waits (returns False).
"""

from __future__ import annotations

from mitmproxy.proxy import events, layer

EMPTY = b"\r\n"


def skip_empty_lines(nextlayer: layer.NextLayer) -> bool:
    """Drop the CR and LF bytes the client's data begins with from `nextlayer`'s held
    events; False when the client has sent nothing else yet (decide later)."""
    client = nextlayer.context.client
    if client.transport_protocol != "tcp":
        return True
    kept: list[events.Event] = []
    skipped, started = False, False
    for event in nextlayer.events:
        if not started and isinstance(event, events.DataReceived) and event.connection == client:
            data = event.data.lstrip(EMPTY)
            skipped = skipped or len(data) != len(event.data)
            if not data:
                continue  # an event of empty lines only: gone
            event.data, started = data, True
        kept.append(event)
    nextlayer.events = kept
    return started or not skipped
