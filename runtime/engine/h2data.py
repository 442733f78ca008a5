"""An HTTP/2 body goes through the layers per upstream read, not per DATA frame (issue 36, D289).

A client that offers `h2` (curl does) gets HTTP/2 on both legs when the upstream speaks it
(D19). nginx sends a body in DATA frames of 8 KiB (`http2_chunk_size`), and mitmproxy's
HTTP/2 layer hands each frame on as its own event: per 8 KiB, one `ResponseData` through
the HTTP stream, the addons' stream wrappers and the client's HTTP/2 connection, one
`SendData` and one TLS write. A 1 GiB download through curl cost 10 s of proxy CPU, against
4.6 s for the same bytes over HTTP/1.1 (docs/decisions.md D289 has the profile).

Two changes, installed once by the lean engine (`install`):

* `merged`: the events one `receive_data` call returns have each run of consecutive
  `DataReceived` of one stream joined into one event (the data joined, the flow-controlled
  lengths summed, the last frame's `stream_ended` kept). One upstream read of 64 KiB is
  then one pass through the layers; the client's HTTP/2 connection still cuts it into DATA
  frames of the client's maximum frame size, and the flow-control credit given back
  upstream is the same sum of the same frames. Nothing waits: only what one read brought
  is joined, and any other event (headers, trailers, a reset, a ping, another stream's
  data) ends a run, so the order of everything else is kept. The frames an upstream read
  left unfinished wait in `_pending_frames` (D318); on a client's leg, only what the
  upload relay left there (relayh2up, D656), joined before the next read.
* `short_body_repr`: h2 formats every received frame for its trace log (`repr(frame)` is
  evaluated even when nothing logs), and hyperframe's `DataFrame` repr hexlifies the whole
  body to show its first 10 bytes: 11 % of the proxy's time in the profile. The
  replacement gives the same text from the first 10 bytes only.

tests/runtime/test_h2data.py pins both against the installed h2 and hyperframe. Its row in
runtime/engine/patches.py is followed by h2frames's (runtime/engine/h2frames.py): an
upstream's DATA frames joined before h2 parses them (D318), and a large chunk framed for
an HTTP/2 client in one pass (D319).
"""

from __future__ import annotations

import binascii
from collections.abc import Buffer

import h2.errors
import h2.events
import h2.exceptions
from hyperframe.frame import DataFrame
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

from sandbox_egress.runtime.engine import h2frames

_HEADER = 9  # an HTTP/2 frame header
_SHOWN = 10  # bytes of the body hyperframe's repr shows (20 hex digits, then "...")
_original_receive_data = BufferedH2Connection.receive_data


def install() -> None:
    """mitmproxy's HTTP/2 connections merge DATA events; DATA frames repr cheaply."""
    BufferedH2Connection.receive_data = _merging_receive_data  # type: ignore[method-assign]
    # Typed for `Frame` in hyperframe; this one is DataFrame's own (it reads its padding).
    DataFrame._body_repr = short_body_repr  # type: ignore[method-assign, assignment]


def merged(found: list[h2.events.Event]) -> list[h2.events.Event]:
    """`found` with each run of consecutive `DataReceived` of one stream joined into one."""
    out: list[h2.events.Event] = []
    run: list[h2.events.DataReceived] = []
    for event in found:
        if type(event) is h2.events.DataReceived:
            if run and run[0].stream_id == event.stream_id and run[-1].stream_ended is None:
                run.append(event)
                continue
            _flush(run, out)
            run = [event]
            continue
        _flush(run, out)
        run = []
        out.append(event)
    _flush(run, out)
    return out


def _flush(run: list[h2.events.DataReceived], out: list[h2.events.Event]) -> None:
    if len(run) == 1:
        out.append(run[0])
    elif run:
        joined = h2.events.DataReceived(stream_id=run[0].stream_id)
        joined.data = b"".join(event.data for event in run)
        joined.flow_controlled_length = sum(event.flow_controlled_length for event in run)
        joined.stream_ended = run[-1].stream_ended
        out.append(joined)


def _merging_receive_data(self: BufferedH2Connection, data: Buffer) -> list[h2.events.Event]:
    if self.config.client_side:  # the upstream leg: its DATA frames joined first (D318)
        pending = self.__dict__.setdefault("_pending_frames", bytearray())
        pending += data
        data = h2frames.coalesce(pending, self.max_inbound_frame_size)
    elif self.__dict__.get("_pending_frames"):  # a client leg: what the upload relay left
        pending = self.__dict__.pop("_pending_frames")  # of a frame comes first (D656)
        data = bytes(pending + data)
    found = merged(_original_receive_data(self, data))
    _refuse_oversized(self)
    return found


def _refuse_oversized(conn: BufferedH2Connection) -> None:
    """A frame whose header announces more than the connection accepts is refused once
    its header is in, as h2 refuses it once it is whole: h2 4.4 keeps such a frame in its
    buffer until all of it arrived, so a peer could make it hold 16 MiB per connection
    (D660). The unfinished frame is in h2's buffer, or in `_pending_frames` on an upstream
    leg (D318) or after the upload relay (D656)."""
    waiting = conn.incoming_buffer._data or conn.__dict__.get("_pending_frames") or b""
    if len(waiting) >= _HEADER and int.from_bytes(waiting[:3]) > conn.max_inbound_frame_size:
        conn._terminate_connection(h2.errors.ErrorCodes.FRAME_SIZE_ERROR)
        raise h2.exceptions.FrameTooLargeError(
            f"Received overlong frame: length {int.from_bytes(waiting[:3])}, "
            f"max {conn.max_inbound_frame_size}"
        )


def short_body_repr(self: DataFrame) -> str:
    """What hyperframe's `Frame._body_repr` gives for a DATA frame (`_raw_data_repr` of
    the serialized body), from its first `_SHOWN` bytes instead of all of them."""
    padding = self.serialize_padding_data()
    size = len(padding) + len(self.data) + self.pad_length
    if not size:
        return "None"
    shown = (padding + bytes(self.data[:_SHOWN]) + b"\0" * min(self.pad_length, _SHOWN))[:_SHOWN]
    return (
        "<hex:" + binascii.hexlify(shown).decode("ascii") + ("..." if size > _SHOWN else "") + ">"
    )
