"""Two in-memory h2 connections handshaken with one GET open and answered with headers: the
pair the runtime's HTTP/2 tests (test_h2data, test_h2frames) feed frames through."""

from __future__ import annotations

from h2.connection import H2Connection

GET = [(":method", "GET"), (":scheme", "https"), (":authority", "a.test"), (":path", "/")]


def open_get(client: H2Connection, server: H2Connection) -> int:
    """Handshakes `client` with `server`, sends a GET and its 200's headers; the stream id."""
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    stream: int = client.get_next_available_stream_id()
    client.send_headers(stream, GET, end_stream=True)
    server.receive_data(client.data_to_send())
    server.send_headers(stream, [(":status", "200")])
    client.receive_data(server.data_to_send())
    return stream
