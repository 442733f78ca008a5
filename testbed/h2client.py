"""A minimal HTTP/2 exchange over an already negotiated TLS socket (ALPN "h2").

Sends every request as its own stream, then reads until each stream ended or was
reset, or the deadline passed. Headers are sent exactly as given, so a test can put
any `:authority` on any stream. A connection the peer closes or resets ends the read.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config as h2_config
import h2.connection as h2_connection
import h2.events as h2_events


@dataclass
class H2Result:
    headers: dict[int, dict[str, str]] = field(default_factory=dict)
    bodies: dict[int, bytes] = field(default_factory=dict)
    ended: set[int] = field(default_factory=set)
    trailers: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    terminated: bool = False  # the peer sent GOAWAY

    def status(self, stream_id: int) -> str | None:
        return self.headers.get(stream_id, {}).get(":status")


def exchange(
    sock: socket.socket,
    requests: Sequence[Sequence[tuple[str | bytes, str | bytes]]],
    timeout: float = 10.0,
    *,
    validate: bool = True,
) -> H2Result:
    """`validate=False` sends header lists h2 would refuse to build (duplicate or misplaced
    pseudo-headers, connection-specific fields, uppercase names) exactly as given."""
    client = h2_connection.H2Connection(
        h2_config.H2Configuration(
            client_side=True,
            header_encoding="utf-8",
            validate_outbound_headers=validate,
            normalize_outbound_headers=validate,
            validate_inbound_headers=True,
        )
    )
    client.initiate_connection()
    ids = []
    for headers in requests:
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, headers, end_stream=True)
        ids.append(stream_id)
    sock.sendall(client.data_to_send())

    result = H2Result(bodies={i: b"" for i in ids})
    deadline = time.monotonic() + timeout
    while result.ended != set(ids) and time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except OSError:  # reset, TLS closed without close_notify, or the deadline
            break
        if not data:
            break
        for event in client.receive_data(data):
            if isinstance(event, h2_events.ResponseReceived):
                # header_encoding above: h2 gives names and values as str
                result.headers[event.stream_id] = {str(n): str(v) for n, v in event.headers}
            elif isinstance(event, h2_events.DataReceived):
                result.bodies[event.stream_id] += event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2_events.TrailersReceived):
                result.trailers[event.stream_id] = [(str(n), str(v)) for n, v in event.headers]
            elif isinstance(event, h2_events.StreamEnded | h2_events.StreamReset):
                result.ended.add(event.stream_id)
            elif isinstance(event, h2_events.ConnectionTerminated):
                result.terminated = True
        if result.terminated:
            break
        sock.sendall(client.data_to_send())
    return result
