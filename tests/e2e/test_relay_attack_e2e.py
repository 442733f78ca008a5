"""End to end, the body relay attacked (issue 49, D620-D629): framing a hostile upstream or
client writes must reach the other end exactly as it does through mitmproxy's layers.

Each attack runs the same bytes through two proxies, `--body-relay` off and on, against
testbed/script_server.py (a TLS upstream that writes exactly what the test scripted and logs
every byte it received): what the client read, what the upstream received and the audit
line's status and byte counts must be equal, and each test also pins the exact outcome.
`engine.relayed` in `/status` shows the relay carried the attack's body where it should.
The two proxies serve the whole module (issue 49, D640: two starts per test were most of
its time); an attack begins once the one before it has no connection open in them, and reads
only its own audit lines, its own upstream connection (the one carrying its script's name)
and its own change of `engine.relayed`.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.netns import Topology
from testbed.rawhttp import Conn
from testbed.testca import Pki
from tests.e2e.conftest import SECRET_ENV, PrivateProxy, Scripted, script_upstreams

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

PORT = 8093
HOST, METERED = "other.allowed.test", "x.wild.test"
BUDGET = 10000  # upload bytes a day for METERED
QUIET_S = 1.5  # the client stops reading after this long without a byte
CONFIG = f"""\
network:
  allowlist:
    - domain: {HOST}
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: {METERED}
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
      budget: {{upload: "{BUDGET}/day"}}
    - domain: 198.18.1.0/24  # opens the upstreams' reserved range
"""


@pytest.fixture(scope="module")
def scripted(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Scripted]:
    with script_upstreams(topology, pki, e2e_dir, "relay-script", {PORT: True}) as up:
        yield up


@pytest.fixture(scope="module")
def pair(module_private_proxy: Callable[..., PrivateProxy]) -> tuple[PrivateProxy, PrivateProxy]:
    """Two proxies for the module: the relay off, then on."""
    start = module_private_proxy
    return start("atk-layers", CONFIG), start("atk-relay", CONFIG, "--body-relay")


@dataclass(frozen=True)
class Seen:
    client: bytes  # every byte the client read, until the proxy closed or went quiet
    upstream: bytes  # every byte the upstream received on its connection
    audit: list[tuple[Any, ...]]  # (status, reason, bytes sent, received) per audit line
    relayed: int  # bytes the relay carried (0 with the relay off)


def _read_all(conn: Conn, until: int | None = None) -> bytes:
    """Every byte until the proxy closes or goes quiet; or, with `until`, until that many
    came, and then the client resets the connection (RST, no close_notify)."""
    got = b""
    conn.sock.settimeout(QUIET_S if until is None else 10)  # with `until`: they must come
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            data = conn.sock.recv(65536)
        except OSError:  # a timeout (quiet) or a reset
            break
        if not data:
            break
        got += data
        if until is not None and len(got) >= until:
            break
    if until is not None:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return got


def _of(event: dict[str, Any], name: str) -> bool:
    """Whether `event` is the upstream's log of a connection that carried the request of
    script `name` (an earlier attack's connection may end, and log, during this one)."""
    request_line = f" /s/{name} HTTP/1.1\r\n".encode()
    return event["event"] == "conn" and request_line in bytes.fromhex(event["received"])


def _relayed(p: PrivateProxy) -> int:
    relayed = p.process.status().get("engine", {}).get("relayed")
    return int(relayed["bytes"]) if relayed else 0


def attack(
    p: PrivateProxy,
    up: Scripted,
    name: str,
    steps: list[list[Any]],
    client: list[bytes],
    pause: float = 0.2,
    host: str = HOST,
    until: int | None = None,
) -> Seen:
    """Run `steps` as the upstream's script `name` while the client writes `client` (each
    piece a write, `pause` apart) in a tunnel to the upstream, then reads to the end."""
    (up.scripts / f"{name}.json").write_text(json.dumps(steps))
    client = [piece.replace(b"@@", name.encode()).replace(b"%%", host.encode()) for piece in client]
    p.wait_idle()
    mark, audit_mark, before = up.log.mark(), p.view.audit_log.mark(), _relayed(p)
    with p.view.tunnel(f"{host}:{PORT}") as conn:
        for i, piece in enumerate(client):
            if i:
                time.sleep(pause)
            try:
                conn.send(piece)
            except OSError:
                break
        got = _read_all(conn, until)
    try:
        upstream = up.log.wait_for(mark, lambda e: _of(e, name), timeout=5)
    except AssertionError:  # the proxy never connected: nothing reached the upstream
        upstream = {"received": ""}
    lines = [
        (a["status"], a["reason"], a["bytes_sent"], a["bytes_received"])
        for a in p.view.audit_log.since(audit_mark)
        if a.get("host") == host and a.get("method") != "CONNECT"
    ]
    received = bytes.fromhex(upstream["received"]).replace(name.encode(), b"@@")
    return Seen(got, received, lines, _relayed(p) - before)


def both(
    pair: tuple[PrivateProxy, PrivateProxy], up: Scripted, name: str, steps: list[list[Any]],
    client: list[bytes], pause: float = 0.2, host: str = HOST, until: int | None = None,
) -> tuple[Seen, Seen]:  # fmt: skip
    layers = attack(pair[0], up, f"{name}-layers", steps, client, pause, host, until)
    relay = attack(pair[1], up, f"{name}-relay", steps, client, pause, host, until)
    assert relay.client == layers.client, _tails(relay.client, layers.client)
    assert relay.upstream == layers.upstream, _tails(relay.upstream, layers.upstream)
    assert relay.audit == layers.audit
    assert layers.relayed == 0
    return layers, relay


def _tails(relay: bytes, layers: bytes) -> tuple[int, int, bytes, bytes]:
    """(lengths and last bytes) of what the relay and the layers let through."""
    return len(relay), len(layers), relay[-40:], layers[-40:]


def get(method: str = "GET", *fields: str) -> bytes:
    """A request head for the script the attack runs (`@@`: its name)."""
    lines = "".join(f"{f}\r\n" for f in fields)
    return f"{method} /s/@@ HTTP/1.1\r\nHost: %%\r\n{lines}\r\n".encode()


def send(data: bytes) -> list[Any]:
    return ["send", data.hex()]


def head(*fields: str, status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\n" + "".join(f"{f}\r\n" for f in fields) + "\r\n").encode()


CHUNKED = "Transfer-Encoding: chunked"
A, B = b"a" * 3000, b"b" * 3000


def chunk(data: bytes, size: str | None = None) -> bytes:
    return (size or f"{len(data):x}").encode() + b"\r\n" + data + b"\r\n"


def framed(*pieces: bytes) -> bytes:
    """What the proxy writes for these pieces of a chunked message (mitmproxy's framing)."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


def answer(seen: Seen) -> tuple[bytes, bytes]:
    """(the answer's head without Date-like fields, its body bytes as the client read them)."""
    head_, _, body = seen.client.partition(b"\r\n\r\n")
    return head_.split(b"\r\n", 1)[0], body


# -- the upstream's chunk framing --------------------------------------------------------------


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(chunk(B, "BB8"), id="upper-hex"),
        pytest.param(chunk(B, "00000bb8"), id="leading-zeros"),
        pytest.param(chunk(B, "0000000000000000bb8"), id="19-digits"),
        pytest.param(chunk(B, "bb8;ext=1"), id="extension"),
        pytest.param(chunk(B, "bb8 "), id="space"),
    ],
)
def test_chunk_sizes_h11_accepts_are_forwarded_alike(pair, scripted, second: bytes):
    seen, relay = both(
        pair, scripted, f"sizes-{second[:6].hex()}",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(second), ["sleep", 0.3],
         send(chunk(A) + b"0\r\n\r\n"), ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    status, body = answer(seen)
    assert (status, body) == (b"HTTP/1.1 200 OK", framed(A, B, A) + b"0\r\n\r\n")
    assert seen.audit == [(200, "allowlisted", 0, 9000)]
    assert relay.relayed >= 3000  # the last A at least; B too where the relay reads its size


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(chunk(B, "bb8\n")[:-2], id="bare-lf-size"),
        pytest.param(b"bb8\r\n" + B + b"ZZ", id="wrong-chunk-end"),
        pytest.param(b"bb8\r\n" + B + b"\n", id="bare-lf-end"),
        pytest.param(chunk(B, "000000000000000000bb8"), id="21-digits"),
        pytest.param(chunk(B, "-bb8"), id="negative"),
        pytest.param(chunk(B, "0xbb8"), id="0x"),
    ],
)
def test_chunk_framing_h11_refuses_ends_alike(pair, scripted, bad: bytes):
    seen, relay = both(
        pair, scripted, f"bad-{bad[:6].hex()}-{len(bad)}",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(chunk(A)), ["sleep", 0.3],
         send(bad + chunk(A) + b"0\r\n\r\n"), ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    status, body = answer(seen)
    assert status == b"HTTP/1.1 200 OK"
    assert body.startswith(framed(A, A))
    assert not body.endswith(b"0\r\n\r\n")  # never a clean end: the client sees a cut
    assert b"ZZ" not in body
    assert relay.relayed >= 3000


def test_a_huge_chunk_size_is_forwarded_until_the_upstream_closes(pair, scripted):
    seen, relay = both(
        pair, scripted, "huge",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(b"FFFFFFFFFFFFFFFF\r\n" + B),
         ["sleep", 0.3], send(A), ["close"]],
        [get()],
    )  # fmt: skip
    status, body = answer(seen)
    assert (status, body) == (b"HTTP/1.1 200 OK", framed(A, B, A))
    assert relay.relayed == 6000  # the first chunk came with the head: the layers'


def test_a_response_pipelined_after_the_last_chunk_is_not_forwarded(pair, scripted):
    evil = head("Content-Length: 5") + b"EVIL!"
    seen, _ = both(
        pair, scripted, "pipelined",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(chunk(B) + b"0\r\n\r\n" + evil),
         ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    assert answer(seen) == (b"HTTP/1.1 200 OK", framed(A, B) + b"0\r\n\r\n")
    assert b"EVIL" not in seen.client


# -- the echo mask ----------------------------------------------------------------------------


def test_a_secret_cut_across_chunks_and_records_is_masked_alike(pair, scripted):
    secret = pair[0].view.secrets[0].encode()
    cut = len(secret) // 2
    steps = [
        send(head(CHUNKED) + chunk(A)), ["sleep", 0.3],
        send(chunk(A + secret[:cut])), ["sleep", 0.3],
        send(chunk(secret[cut:] + B)[:-1]), ["sleep", 0.3], send(b"\n"), ["sleep", 0.3],
        send(chunk(secret) + b"0\r\nX-Leak: " + secret + b"\r\n\r\n"), ["drain", 0.5], ["close"],
    ]  # fmt: skip
    seen, relay = both(pair, scripted, "echo-chunked", steps, [get()])
    assert secret not in seen.client
    assert secret[:cut] + secret[cut:] not in seen.client.replace(b"\r\n", b"")
    assert seen.client.endswith(b"0\r\n\r\n")
    assert relay.relayed > 0


def test_a_secret_cut_across_records_of_a_length_body_is_masked_alike(pair, scripted):
    secret = pair[0].view.secrets[0].encode()
    cut = len(secret) // 3
    body = A + secret + B + secret
    steps = [
        send(head(f"Content-Length: {len(body)}") + A + secret[:cut]), ["sleep", 0.3],
        send(secret[cut:] + B), ["sleep", 0.3], send(secret[:-1]), ["sleep", 0.3],
        send(secret[-1:]), ["drain", 0.5], ["close"],
    ]  # fmt: skip
    seen, relay = both(pair, scripted, "echo-length", steps, [get()])
    status, got = answer(seen)
    assert status == b"HTTP/1.1 200 OK"
    assert secret not in seen.client
    assert len(got) == len(body)
    assert relay.relayed > 0


# -- Content-Length lies ----------------------------------------------------------------------


def test_more_than_the_content_length_in_one_read_is_not_forwarded(pair, scripted):
    seen, relay = both(
        pair, scripted, "longer",
        [send(head("Content-Length: 6000") + A), ["sleep", 0.3],
         send(B + b"SMUGGLED" + head("Content-Length: 3") + b"bad"), ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    assert answer(seen) == (b"HTTP/1.1 200 OK", A + B)
    assert relay.relayed >= 2999


def test_fewer_than_the_content_length_then_a_close_is_cut_alike(pair, scripted):
    seen, relay = both(
        pair, scripted, "shorter",
        [send(head("Content-Length: 9000") + A), ["sleep", 0.3], send(B), ["close"]],
        [get()],
    )  # fmt: skip
    assert answer(seen) == (b"HTTP/1.1 200 OK", A + B)
    assert relay.relayed == 3000


def test_an_upstream_reset_mid_body_is_cut_alike(pair, scripted):
    seen, relay = both(
        pair, scripted, "reset",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(b"bb8\r\n" + B[:100]),
         ["sleep", 0.3], ["reset"]],
        [get()],
    )  # fmt: skip
    status, body = answer(seen)
    assert status == b"HTTP/1.1 200 OK"
    assert body.startswith(framed(A))
    assert relay.relayed > 0


@pytest.mark.parametrize(
    "status_fields",
    [
        pytest.param(("204 No Content", "Content-Length: 6000"), id="204"),
        pytest.param(("304 Not Modified", CHUNKED), id="304"),
    ],
)
def test_a_bodiless_status_with_a_body_is_answered_alike(pair, scripted, status_fields):
    status, field = status_fields
    seen, relay = both(
        pair, scripted, f"bodiless-{status[:3]}",
        [send(head(field, status=status) + chunk(A)), ["sleep", 0.3], send(B),
         ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    # mitmproxy ends a "chunked" answer with a last chunk even where no body may follow
    # (a 304): the layers' own framing, relay or not (D622); nothing of the body goes on.
    ending = b"0\r\n\r\n" if CHUNKED in field else b""
    assert answer(seen) == (f"HTTP/1.1 {status}".encode(), ending)
    assert relay.relayed == 0


def test_a_head_answer_with_a_body_is_answered_alike(pair, scripted):
    seen, relay = both(
        pair, scripted, "head",
        [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(chunk(B) + b"0\r\n\r\n"),
         ["drain", 0.5], ["close"]],
        [get("HEAD")],
    )  # fmt: skip
    assert answer(seen) == (b"HTTP/1.1 200 OK", b"")
    assert relay.relayed == 0


def test_an_interim_answer_then_a_body_is_forwarded_alike(pair, scripted):
    seen, relay = both(
        pair, scripted, "interim",
        [send(head(status="100 Continue")), ["sleep", 0.2],
         send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(chunk(B) + b"0\r\n\r\n"),
         ["drain", 0.5], ["close"]],
        [get()],
    )  # fmt: skip
    # The unasked-for 100 is dropped (D673; mitmproxy alone took it for the answer and never
    # forwarded the real one): the client gets the answer, its body relayed.
    assert seen.client == head(CHUNKED) + framed(A, B) + b"0\r\n\r\n"
    assert relay.relayed >= 3000


# -- the client's framing (uploads) -----------------------------------------------------------

UPLOAD_ANSWER = [["drain", 1.0], send(head("Content-Length: 2") + b"ok"), ["drain", 0.5], ["close"]]
OK = head("Content-Length: 2") + b"ok"  # what the client reads of UPLOAD_ANSWER


def _after_first(upstream: bytes, first_body: bytes) -> tuple[bytes, bytes]:
    """The head and the rest the upstream received after the first request's `first_body`
    on the same connection."""
    _, _, rest = upstream.partition(b"\r\n\r\n")
    assert rest.startswith(first_body), rest[:80]
    head, _, body = rest[len(first_body) :].partition(b"\r\n\r\n")
    return head, body


def test_a_request_pipelined_after_the_last_chunk_goes_as_a_request(pair, scripted):
    """The pipelined GET follows the POST's answer on the same connection, as its head
    alone: no chunked terminator of the POST's after it (D670; before, under python -O, a
    stray `0\\r\\n\\r\\n` followed it). The upstream closes that connection unanswered,
    so the GET goes once more on a new one (D680), whose answer the client reads."""
    seen, relay = both(
        pair, scripted, "up-pipelined", UPLOAD_ANSWER,
        [get("POST", CHUNKED) + chunk(A), chunk(B), chunk(A) + b"0\r\n\r\n" + get("GET")],
        until=2 * len(OK),
    )  # fmt: skip
    assert seen.upstream.startswith(b"POST /s/@@ HTTP/1.1\r\n")
    sent, rest = _after_first(seen.upstream, framed(A, B, A) + b"0\r\n\r\n")
    assert (sent.split(b"\r\n")[0], rest) == (b"GET /s/@@ HTTP/1.1", b"")
    assert seen.client == OK + OK
    assert relay.relayed >= 5999


def test_a_request_pipelined_after_a_chunked_one_reaches_the_upstream_as_sent(pair, scripted):
    """A request of a length pipelined after a chunked one: its body reaches the upstream
    as the client sent it, not framed as chunks; the request hidden in its tail stays body
    (D670: under python -O mitmproxy's HTTP/1 client took the second request while it
    still held the first, framed the second's body as the first's chunks, and the body's
    tail reached the upstream as a request of its own, past the policy)."""
    body = b"x" * 16 + f"GET /hidden HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    second = get("POST", f"Content-Length: {len(body)}") + body
    seen, relay = both(
        pair, scripted, "up-pipelined-cl", UPLOAD_ANSWER,
        [get("POST", CHUNKED) + chunk(A), chunk(A) + b"0\r\n\r\n" + second],
    )  # fmt: skip
    sent, rest = _after_first(seen.upstream, framed(A, A) + b"0\r\n\r\n")
    assert (sent.split(b"\r\n")[0], rest) == (b"POST /s/@@ HTTP/1.1", body)
    assert seen.client.startswith(OK), seen.client
    assert seen.client[len(OK) :].startswith(b"HTTP/1.1 502 "), seen.client  # never answered
    assert relay.relayed >= 2999


@pytest.mark.parametrize(
    ("fields", "forwarded"),
    [
        pytest.param((CHUNKED, "Content-Length: 3000"), False, id="te-and-cl"),
        pytest.param(("Transfer-Encoding: chunked, identity",), False, id="chunked-identity"),
        pytest.param(("Transfer-Encoding: gzip, chunked",), True, id="gzip-chunked"),
        pytest.param(("Transfer-Encoding: identity, chunked",), False, id="identity-chunked"),
        pytest.param(("Transfer-Encoding: xchunked",), False, id="xchunked"),
    ],
)
def test_smuggling_shapes_are_decided_alike(pair, scripted, fields, forwarded: bool):
    seen, relay = both(
        pair, scripted, f"smuggle-{fields[-1][-9:].replace(' ', '')}", UPLOAD_ANSWER,
        [get("POST", *fields) + chunk(A), chunk(B), chunk(A) + b"0\r\n\r\n"],
    )  # fmt: skip
    if not forwarded:  # mitmproxy's HTTP/1 layer refuses the head: nothing goes upstream
        assert seen.client.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert (seen.upstream, seen.audit, relay.relayed) == (b"", [], 0)
        return
    _, _, body = seen.upstream.partition(b"\r\n\r\n")
    assert body == framed(A, B, A) + b"0\r\n\r\n"
    assert seen.audit == [(200, "allowlisted", 9000, 2)]
    assert relay.relayed >= 3000


def test_a_client_sending_more_than_its_content_length_sends_a_second_request(pair, scripted):
    second = get("GET")
    seen, relay = both(
        pair, scripted, "up-longer", UPLOAD_ANSWER,
        [get("POST", "Content-Length: 6000") + A, B + second],
    )  # fmt: skip
    sent_head, _, body = seen.upstream.partition(b"\r\n\r\n")
    assert sent_head.startswith(b"POST /s/")
    assert body.startswith(A + B + b"GET /s/@@ HTTP/1.1\r\n")  # a request of its own
    assert relay.relayed == 2999  # the first part came with the head; the last byte: layers'


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"bb8\r\n" + B + b"ZZ", id="wrong-chunk-end"),
        pytest.param(chunk(B, "bb8;x"), id="extension"),
        pytest.param(chunk(B, "bb8\n")[:-2], id="bare-lf"),
    ],
)
def test_a_client_chunk_framing_is_judged_by_h11_alike(pair, scripted, bad: bytes):
    seen, relay = both(
        pair, scripted, f"up-bad-{bad[:6].hex()}", UPLOAD_ANSWER,
        [get("POST", CHUNKED) + chunk(A), chunk(A), bad, chunk(A) + b"0\r\n\r\n"],
    )  # fmt: skip
    assert b"ZZ" not in seen.upstream
    assert relay.relayed >= 3000


def test_an_upload_budget_cuts_at_the_same_byte(pair, scripted):
    size = 4000
    pieces = [bytes([65 + i]) * size for i in range(5)]
    seen, relay = both(
        pair, scripted, "budget", UPLOAD_ANSWER,
        [get("POST", CHUNKED) + chunk(pieces[0])] + [chunk(p) for p in pieces[1:]]
        + [b"0\r\n\r\n"],
        host=METERED,
    )  # fmt: skip
    _, _, body = seen.upstream.partition(b"\r\n\r\n")
    # What the budget allowed, and no last chunk: the upstream sees an unfinished body,
    # never a complete request cut short (D620; before, the layers wrote `0\r\n\r\n`).
    assert body == framed(*pieces[: BUDGET // size])
    assert seen.client == b""  # hung up at the cut
    assert seen.audit == [(None, "budget_exceeded", 8000, 0)]
    assert relay.relayed > 0


def test_a_client_reset_mid_upload_leaves_the_upstream_an_unfinished_body(pair, scripted):
    seen, relay = both(
        pair, scripted, "up-reset", UPLOAD_ANSWER,
        [get("POST", CHUNKED) + chunk(A), chunk(B), b"bb8\r\n" + A[:100]], until=0,
    )  # fmt: skip
    _, _, body = seen.upstream.partition(b"\r\n\r\n")
    assert body == framed(A, B, A[:100])  # what came, never a last chunk
    assert [line[:3] for line in seen.audit] == [(200, "allowlisted", 6100)]  # it answered
    assert relay.relayed == 3100


def test_a_client_reset_mid_download_ends_it_alike(pair, scripted):
    steps = [send(head(CHUNKED) + chunk(A)), ["sleep", 0.3], send(chunk(B)), ["sleep", 1.0]]
    steps += [item for _ in range(20) for item in (send(chunk(A)), ["sleep", 0.05])]
    steps += [["close"]]
    seen, relay = both(pair, scripted, "down-reset", steps, [get()], until=6000)
    status, body = answer(seen)
    assert status == b"HTTP/1.1 200 OK"
    assert body.startswith(framed(A))
    assert [line[:2] for line in seen.audit] == [(200, "allowlisted")]
    assert relay.relayed >= 3000


def test_an_upload_after_100_continue_is_relayed_alike(pair, scripted):
    seen, relay = both(
        pair, scripted, "up-continue", UPLOAD_ANSWER,
        [get("POST", "Expect: 100-continue", "Content-Length: 9000"), A, B, A],
    )  # fmt: skip
    assert seen.client.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    sent_head, _, body = seen.upstream.partition(b"\r\n\r\n")
    assert b"expect" not in sent_head.lower()  # mitmproxy answered it
    assert body == A + B + A
    assert seen.audit == [(200, "allowlisted", 9000, 2)]
    assert relay.relayed >= 5999
