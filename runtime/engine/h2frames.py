"""An HTTP/2 upstream's DATA frames reach h2 as few large frames (issue 36, D318).

nginx sends a body in DATA frames of 8 KiB or less, and h2 takes each one through its frame
buffer, a frame object, its trace text and both state machines: per GiB 131,072 times, the
largest share of the proxy's CPU on the session's download (D289's profile). D289 joins the
events one read brings; this joins the frames themselves before h2 parses them.

`coalesce` rewrites the complete frames at the head of a receive buffer: each run of
consecutive DATA frames of one stream, unpadded and without flags except on the run's last
frame, becomes one DATA frame carrying their payloads in order with the last frame's flags
(END_STREAM stays on the last byte), as long as the joined payload fits `limit`, the
largest frame the connection accepts (`max_inbound_frame_size`, 128 KiB in mitmproxy). h2
then sees the same bytes of the same stream in the same order, the same flow-controlled
length in total, and every other frame untouched and in place. What it does not join: a
padded frame (its padding counts against the window but is not data), a frame on stream 0
or over `limit` (h2 rejects those as before), any frame after one with flags. An incomplete
frame at the end stays in the buffer for the next read, as it would in h2's own buffer.

Installed for the connections that speak first from the frame layer: the client side of a
connection (the proxy's upstream leg); a server-side connection's peer starts with the
connection preface, which `coalesce` would not parse.
"""

from __future__ import annotations

import struct

from h2.connection import H2Connection
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

_HEADER = 9
_FIELDS = struct.Struct(">HBBBL")  # length's high 16 bits, its low 8, type, flags, stream
_DATA = 0
_PADDED = 0x8


def coalesce(buffer: bytearray, limit: int) -> bytearray:
    """The complete frames at the head of `buffer`, runs of DATA joined (module doc); they
    are removed from `buffer`, which keeps an incomplete last frame."""
    out = bytearray()
    view = memoryview(buffer)
    size, at = len(buffer), 0
    run_header = -1  # where in `out` the open run's header is, -1 when none is open
    run_length = run_sid = 0
    while size - at >= _HEADER:
        high, low, kind, flags, sid = _FIELDS.unpack_from(buffer, at)
        length = high << 8 | low
        end = at + _HEADER + length
        if end > size:
            break
        joinable = kind == _DATA and not flags & _PADDED and sid & 0x7FFFFFFF and length <= limit
        if joinable and run_header >= 0 and sid == run_sid and run_length + length <= limit:
            out += view[at + _HEADER : end]
            run_length += length
            out[run_header : run_header + 3] = run_length.to_bytes(3)
            out[run_header + 4] = flags
        else:
            if joinable:
                run_header, run_length, run_sid = len(out), length, sid
            out += view[at:end]
        if not joinable or flags:
            run_header = -1
        at = end
    view.release()
    del buffer[:at]
    return out


# ---- sending: a body chunk's DATA frames framed in one pass ---------------------------------

_original_send_data = BufferedH2Connection.send_data


def install() -> None:
    """mitmproxy's HTTP/2 connections frame a large body chunk in one pass (`send_data`)."""
    BufferedH2Connection.send_data = send_data  # type: ignore[method-assign]


def send_data(
    self: BufferedH2Connection,
    stream_id: int,
    data: bytes,
    end_stream: bool = False,
    pad_length: None = None,
) -> None:
    """`BufferedH2Connection.send_data`, with the full frames in the middle of a chunk framed
    here rather than one h2 call each (D319).

    Of a chunk longer than two frames, with nothing queued on its stream: the first frame
    goes through h2 (its state checks, its window bookkeeping; a closed or reset stream
    raises there as before), then as many further full frames as the smaller of the stream's
    and the connection's window allows are framed here and counted against both windows, and
    the rest (at least the chunk's last frame, so END_STREAM is h2's) goes through
    mitmproxy's path, which sends what the window allows and queues the remainder. No frame
    is larger than the peer's maximum frame size, none is padded, none carries flags."""
    frame = self.max_outbound_frame_size
    if len(data) <= 2 * frame or self.stream_buffers.get(stream_id):
        return _original_send_data(self, stream_id, data, end_stream)
    fits = min(self.local_flow_control_window(stream_id), len(data) - 1) // frame * frame
    if fits < 2 * frame:
        return _original_send_data(self, stream_id, data, end_stream)
    view = memoryview(data)
    H2Connection.send_data(self, stream_id, view[:frame])
    header = frame.to_bytes(3) + b"\0\0" + stream_id.to_bytes(4)
    out = self._data_to_send
    for start in range(frame, fits, frame):
        out += header
        out += view[start : start + frame]
    framed = fits - frame
    self.outbound_flow_control_window -= framed
    self.streams[stream_id].outbound_flow_control_window -= framed
    return _original_send_data(self, stream_id, data[fits:], end_stream)
