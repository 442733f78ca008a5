"""HTTP/2 streams with large bodies, sent and received in pieces (never held whole).

`H2Stream` wraps one client connection over an ALPN "h2" TLS socket: `send_body`
writes DATA as the peer's flow-control window allows and stops early when the peer
resets the stream; `read_response` reads until the stream ends or is reset, counting
and hashing the body. The test keeps every frame's outcome (status, reset code).
"""

from __future__ import annotations

import hashlib
import select
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field

import h2.config as h2_config
import h2.connection as h2_connection
import h2.events as h2_events
import h2.exceptions as h2_exceptions


@dataclass
class StreamOutcome:
    status: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0
    sha256: str = ""
    ended: bool = False
    reset_code: int | None = None


class H2Stream:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.conn = h2_connection.H2Connection(
            h2_config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        self.outcomes: dict[int, StreamOutcome] = {}
        self._digests: dict[int, hashlib._Hash] = {}
        self._flush()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def open(self, headers: list[tuple[str, str]], end_stream: bool = False) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        self.outcomes[stream_id] = StreamOutcome()
        self._digests[stream_id] = hashlib.sha256()
        self.conn.send_headers(stream_id, headers, end_stream=end_stream)
        self._flush()
        return stream_id

    def _pump(self) -> None:
        """Read once from the socket and handle what arrived."""
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the proxy closed the HTTP/2 connection")
        for event in self.conn.receive_data(data):
            outcome = self.outcomes.get(getattr(event, "stream_id", 0) or 0)
            if outcome is None:
                continue
            if isinstance(event, h2_events.ResponseReceived):
                outcome.headers = dict(event.headers)  # type: ignore[arg-type]
                outcome.status = outcome.headers.get(":status")
            elif isinstance(event, h2_events.DataReceived):
                outcome.body_bytes += len(event.data)
                self._digests[event.stream_id].update(event.data)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2_events.StreamEnded):
                outcome.ended = True
                outcome.sha256 = self._digests[event.stream_id].hexdigest()
            elif isinstance(event, h2_events.StreamReset):
                outcome.reset_code = event.error_code
        self._flush()

    def _readable(self) -> bool:
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        return bool(select.select([self.sock], [], [], 0)[0])

    def done(self, stream_id: int) -> bool:
        outcome = self.outcomes[stream_id]
        return outcome.ended or outcome.reset_code is not None

    def send_body(self, stream_id: int, chunks: Iterable[bytes], end: bool = True) -> int:
        """Send every chunk (an iterable of bytes) as DATA; returns the bytes the peer took
        before it reset the stream (or all of them)."""
        sent = 0
        for chunk in chunks:
            while self._readable():
                self._pump()  # a reset or window update waiting: handle it before sending more
            view = memoryview(chunk)
            while view:
                if self.done(stream_id):
                    return sent
                window = min(
                    self.conn.local_flow_control_window(stream_id),
                    self.conn.max_outbound_frame_size,
                )
                if window <= 0:
                    self._pump()
                    continue
                piece = view[:window]
                try:
                    self.conn.send_data(stream_id, piece.tobytes())
                except h2_exceptions.StreamClosedError:
                    return sent
                self._flush()
                sent += len(piece)
                view = view[len(piece) :]
        if end and not self.done(stream_id):
            self.conn.end_stream(stream_id)
            self._flush()
        return sent

    def read_response(self, stream_id: int) -> StreamOutcome:
        while not self.done(stream_id):
            self._pump()
        return self.outcomes[stream_id]
