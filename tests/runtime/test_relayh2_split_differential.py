"""The client leg's cut (relayh2up._to_layers, `relayh2.layers_end`, D740) against the
relay off, on h2 itself: the same wire, cut into the same reads, fed to two of mitmproxy's
`BufferedH2Connection`s (h2data installed, as the proxy runs): one takes every read whole
(the relay off), the other as the relay does (its first read whole, the relay's route not
yet there; then each read relayed when `relayh2.take` finds complete DATA frames of an open
stream, else `relayh2up._to_layers`: cut by `layers_end`, the rest kept in
`_pending_frames`). The events h2 gives
(each stream's DATA joined, every other event in order, the error that ends it) must be
the same, and after every read h2's buffer and `_pending_frames` are never both non-empty
and together hold less than one frame. Random wires (seeded): HEADERS with CONTINUATIONs,
two streams, DATA of 0 to 128 KiB, padded or not, PINGs, WINDOW_UPDATEs, sometimes a
hostile tail (DATA after END_STREAM, an oversized header); cut anywhere.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from hyperframe.frame import DataFrame
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http._http_h2 import BufferedH2Connection

from sandbox_egress.runtime.engine import h2data, relayh2, relayh2up

LIMIT = 1 << 17
Event = tuple[object, ...]


@pytest.fixture
def installed() -> Iterator[None]:
    receive, own_repr = BufferedH2Connection.receive_data, "_body_repr" in DataFrame.__dict__
    h2data.install()
    yield
    BufferedH2Connection.receive_data = receive  # type: ignore[method-assign]
    if not own_repr:
        del DataFrame._body_repr


def _frame(kind: int, flags: int, sid: int, payload: bytes, length: int | None = None) -> bytes:
    size = len(payload) if length is None else length
    return size.to_bytes(3) + bytes([kind, flags]) + sid.to_bytes(4) + payload


def _server() -> BufferedH2Connection:
    conn = BufferedH2Connection(h2.config.H2Configuration(client_side=False, header_encoding=False))
    conn.initiate_connection()
    conn.data_to_send()
    return conn


def _wire(rng: random.Random) -> bytes:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    wire = bytearray(client.data_to_send())

    def headers(sid: int, split: int | None) -> bytes:
        head = [(":method", "POST"), (":scheme", "https"), (":authority", "a"), (":path", "/u")]
        client.send_headers(sid, head)
        frame = client.data_to_send()
        if split is None:
            return frame
        block = frame[9:]
        return (_frame(1, 0, sid, block[:split]) + _frame(9, 0, sid, block[split : split + 3])
                + _frame(9, 4, sid, block[split + 3 :]))  # fmt: skip

    wire += headers(1, rng.choice([None, 2]))
    opened = False
    for _ in range(rng.randrange(5, 40)):
        roll = rng.random()
        if roll < 0.1:
            wire += _frame(6, 0, 0, rng.randbytes(8))
        elif roll < 0.15:
            wire += _frame(8, 0, 0, rng.randrange(1, 1000).to_bytes(4))
        elif roll < 0.2 and not opened:
            wire += headers(3, rng.choice([None, 1, 5]))
            opened = True
        else:
            sid = 3 if opened and rng.random() < 0.5 else 1
            size = rng.choice([0, 1, 9, 100, 5000, 16384, 40000, LIMIT])
            pad = rng.randrange(256)
            if rng.random() < 0.3 and size + pad + 1 <= LIMIT:
                wire += _frame(0, 8, sid, bytes([pad]) + rng.randbytes(size) + b"\0" * pad)
            else:
                wire += _frame(0, 0, sid, rng.randbytes(size))
    wire += _frame(0, 1, 1, b"")
    if opened:
        wire += _frame(0, 1, 3, b"")
    if rng.random() < 0.2:  # a hostile tail
        wire += rng.choice(
            [_frame(0, 0, 1, b"x"), _frame(0, 0, 5, b"", LIMIT + 1), _frame(1, 0, 7, b"", 200000)]
        )
    return bytes(wire)


def _feed(conn: BufferedH2Connection, data: bytes, seen: list[Event]) -> bool:
    try:
        found = conn.receive_data(data)
    except h2.exceptions.ProtocolError as e:
        seen.append(("error", type(e).__name__))
        return False
    for e in found:
        if type(e) is h2.events.DataReceived:
            seen.append(("data", e.stream_id, bytes(e.data), e.stream_ended is not None))
        elif type(e) is h2.events.RequestReceived:
            seen.append(("request", e.stream_id, tuple(e.headers)))
        else:
            seen.append((type(e).__name__,))
    return True


def _joined(seen: list[Event]) -> tuple[dict[object, bytes], list[Event]]:
    data: dict[object, bytes] = {}
    other: list[Event] = []
    for e in seen:
        if e[0] == "data":
            data[e[1]] = data.get(e[1], b"") + e[2]  # type: ignore[operator]
            if e[3]:
                other.append(("ended", e[1]))
        else:
            other.append(e)
    return data, other


class _Layer:
    """The client's TLS layer as `relayh2up._to_layers` uses it: its child (the HTTP
    layer's `Http2Server`) is `conn.receive_data`."""

    conn = None

    def __init__(self, h2c: BufferedH2Connection, seen: list[Event]) -> None:
        self.h2c, self.seen, self.ok = h2c, seen, True

    def event_to_child(self, event: events.DataReceived) -> Iterator[object]:
        self.ok = _feed(self.h2c, event.data, self.seen)
        yield from ()


def _relaying(conn: BufferedH2Connection, pieces: list[bytes], rng: random.Random) -> list[Event]:
    seen: list[Event] = []
    ok = _feed(conn, pieces[0], seen)  # the first read: h2's whole (no route yet)
    for piece in pieces[1:]:
        if not ok:
            break
        opened = {e[1] for e in seen if e[0] == "request"}
        taken = relayh2.take(conn, piece)
        if (
            taken is not None
            and taken.stream in opened
            and rng.random() < 0.8  # else the upstream is not ready: the layers'
            and relayh2.receiving(conn, taken.stream, taken.size)
        ):
            seen.append(("data", taken.stream, relayh2.received(conn, taken), False))
            conn.data_to_send()
        else:  # the layers', through relayh2up's own cut
            layer = _Layer(conn, seen)
            assert list(relayh2up._to_layers(layer, conn, piece)) == []  # type: ignore[arg-type]
            ok = layer.ok
        if ok:
            held = len(conn.incoming_buffer._data)
            waiting = len(conn.__dict__.get("_pending_frames") or b"")
            assert not (held and waiting), (held, waiting)
            assert held + waiting < 9 + LIMIT, (held, waiting)
    return seen


@pytest.mark.parametrize("block", range(8))
def test_the_relays_cut_gives_h2_the_events_of_the_relay_off(installed: None, block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):
        rng = random.Random(seed)
        wire = _wire(rng)
        cuts = {rng.randrange(1, len(wire)) for _ in range(rng.randrange(1, 60))}
        if rng.random() < 0.5:  # the preface, SETTINGS or HEADERS cut
            cuts.add(rng.randrange(1, 60))
        bounds = [0, *sorted(cuts), len(wire)]
        pieces = [wire[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        off: list[Event] = []
        conn = _server()
        for piece in pieces:
            if not _feed(conn, piece, off):
                break
        on = _relaying(_server(), pieces, rng)
        assert _joined(on) == _joined(off), seed
