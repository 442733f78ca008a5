"""A minimal HTTP/2 exchange over an already negotiated TLS socket (ALPN "h2").

Sends every request as its own stream, then reads until each stream ended or was
reset, or the deadline passed. Headers are sent exactly as given, so a test can put
any `:authority` on any stream.
"""

from __future__ import annotations

import socket
import time
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

    def status(self, stream_id: int) -> str | None:
        return self.headers.get(stream_id, {}).get(":status")


def exchange(
    sock: socket.socket, requests: list[list[tuple[str, str]]], timeout: float = 10.0
) -> H2Result:
    client = h2_connection.H2Connection(
        h2_config.H2Configuration(client_side=True, header_encoding="utf-8")
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
        data = sock.recv(65536)
        if not data:
            break
        for event in client.receive_data(data):
            if isinstance(event, h2_events.ResponseReceived):
                result.headers[event.stream_id] = dict(event.headers)
            elif isinstance(event, h2_events.DataReceived):
                result.bodies[event.stream_id] += event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2_events.TrailersReceived):
                result.trailers[event.stream_id] = [(str(n), str(v)) for n, v in event.headers]
            elif isinstance(event, h2_events.StreamEnded | h2_events.StreamReset):
                result.ended.add(event.stream_id)
        sock.sendall(client.data_to_send())
    return result
