"""An attacker's round on the GOAWAY drain (runtime/engine/goaway.py, D701; D710-D712).

A scripted TLS upstream (testbed/h2script.py) writes exactly the frames each case names and,
unlike an orderly server, keeps its connection open after its GOAWAY unless the case closes
it (RFC 9113 6.8 asks the receiver, not the sender, to stop using the connection); an h2
client (testbed/h2stream.py) sends through a proxy of the module's own, the body relay off
and on. Each case asserts what the client got, which upstream connection carried which
request (the upstream's record of paths per connection), the credential each request
carried to the upstream, and the audit lines. Defects found: requests queued behind the
upstream's stream limit sent on the drained connection (D710), an error GOAWAY after a
graceful one ignored (D711), a request sent again after its client reset it (D712); the
rest held (docs/decisions.md, "Attack round on the GOAWAY drain").
"""

from __future__ import annotations

import contextlib
import itertools
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.h2script import RST_STREAM, SETTINGS, H2Script, Step, data, frame, headers
from testbed.h2stream import H2Stream, StreamOutcome
from testbed.netns import Topology
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy
from tests.e2e.h2_support import (
    CONFIG,
    allowlist,
    answer,
    goaway,
    h2_client,
    h2_upstream,
    refuse,
    unique,
)
from tests.e2e.memory_support import h2_request

pytestmark = pytest.mark.netns

PORT = 9480
HOST = "api.allowed.test"
AUTHORITY = f"{HOST}:{PORT}"
SECRET_HEADER = "Bearer "  # the transform's value starts so (the rest is E2E_SECRET)
BUDGET = 2
BUDGETED = allowlist("budget:", f'  requests: "{BUDGET}/minute"')
ANSWER_S = 1
INTERNAL_ERROR = 0x2
MAX_CONCURRENT_STREAMS = 0x3
WITHIN = 6.0  # what a request may take here (the upstream's connection lives 20 s)


class Upstream(H2Script):
    """`H2Script` that remembers, per request path, the upstream connection (its serving
    thread) and the credential of each time the request reached it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls: dict[str, list[tuple[int, str]]] = {}
        self.first_conn: dict[str, int] = {}  # a test's key -> the connection it drained
        self._local = threading.local()  # the serving thread's connection serial
        self._serial = itertools.count()

    def note(self, fields: dict[str, str]) -> int:
        """The call's connection; kept with its credential's prefix under the path."""
        if not hasattr(self._local, "conn"):
            self._local.conn = next(self._serial)
        conn: int = self._local.conn
        auth = fields.get("authorization", "")
        self.calls.setdefault(fields[":path"], []).append((conn, auth[: len(SECRET_HEADER)]))
        return conn


def key(fields: dict[str, str]) -> str:
    return fields[":path"].rsplit("/", 1)[0]  # /name/serial/which -> /name/serial


@pytest.fixture(scope="module")
def upstream(topology: Topology, pki: Pki) -> Iterator[Upstream]:
    with h2_upstream(topology, pki, PORT, Upstream) as server:

        def queue(sid: int, fields: dict[str, str]) -> list[Step]:
            """The first request: a limit of one stream, then (while the rest wait in the proxy's
            queue) a GOAWAY naming it and its answer; the connection stays open. A request on
            the drained connection is ignored (RFC 9113 6.8); on any other, answered."""
            conn = server.note(fields)
            if fields[":path"].endswith("/a"):
                server.first_conn[key(fields)] = conn
                limit = frame(SETTINGS, 0, 0, struct.pack(">HI", MAX_CONCURRENT_STREAMS, 1))
                return [limit, 0.8, goaway(sid), answer(sid, b"first")]
            if server.first_conn.get(key(fields)) == conn:
                return []
            return [answer(sid, b"again")]

        def error_after(sid: int, fields: dict[str, str]) -> list[Step]:
            """A graceful GOAWAY naming the stream, then one with an error; open, silent."""
            server.note(fields)
            return [0.1, goaway(sid), 0.2, goaway(sid, INTERNAL_ERROR)]

        def down(sid: int, fields: dict[str, str]) -> list[Step]:
            """Two requests at once: the first's GOAWAY names both, a second GOAWAY names only
            the first (the last id going down); the first is answered; open after."""
            conn = server.note(fields)
            if fields[":path"].endswith("/a"):
                server.first_conn[key(fields)] = conn
                return [0.4, goaway(sid + 2), 0.1, goaway(sid), 0.1, answer(sid, b"first")]
            if server.first_conn.get(key(fields)) == conn:
                return []
            return [answer(sid, b"again")]

        def up(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming no stream, then one naming it (the last id going up, which RFC
            9113 6.8 forbids), then an answer on the drained stream: never a second answer."""
            conn = server.note(fields)
            if server.first_conn.setdefault(fields[":path"], conn) == conn:
                return [0.1, goaway(0), 0.05, goaway(sid), 0.3, answer(sid, b"liar")]
            return [answer(sid, b"again")]

        def above(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY whose last id is above every stream (and streams never opened)."""
            server.note(fields)
            return [headers(sid, [(":status", "200")]), goaway(2**31 - 1),
                    data(sid, b"the whole answer", 1)]  # fmt: skip

        def split(sid: int, fields: dict[str, str]) -> list[Step]:
            """The GOAWAY in two writes (two TLS records), its first half with DATA."""
            server.note(fields)
            away = goaway(sid)
            return [headers(sid, [(":status", "200")]), data(sid, b"part one, ") + away[:7], 0.1,
                    away[7:] + data(sid, b"part two", 1)]  # fmt: skip

        def late_refusal(sid: int, fields: dict[str, str]) -> list[Step]:
            """REFUSED_STREAM after the answer's head and some of its body (a hostile upstream)."""
            server.note(fields)
            return [headers(sid, [(":status", "200")]), data(sid, b"some"), 0.1, refuse(sid)]

        def refused(sid: int, fields: dict[str, str]) -> list[Step]:
            """Refused every time: the connection stays open."""
            server.note(fields)
            return [0.05, refuse(sid)]

        def plain(sid: int, fields: dict[str, str]) -> list[Step]:
            server.note(fields)
            return [answer(sid, b"plain")]

        def silent(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming the stream, then nothing: never answered, never closed."""
            server.note(fields)
            return [goaway(sid)]

        def first_call(fields: dict[str, str]) -> bool:
            return len(server.calls.get(fields[":path"], [])) == 1

        def refused_after(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming the stream, then REFUSED_STREAM for it; the connection stays."""
            server.note(fields)
            if first_call(fields):
                return [goaway(sid), 0.1, refuse(sid)]
            return [answer(sid, b"again")]

        def reset_after(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming the stream, then a reset with an error (it was processed)."""
            server.note(fields)
            return [goaway(sid), 0.1, refuse(sid, INTERNAL_ERROR)]

        def refused_once(sid: int, fields: dict[str, str]) -> list[Step]:
            server.note(fields)
            return [refuse(sid)] if first_call(fields) else [answer(sid, b"again")]

        def many(sid: int, fields: dict[str, str]) -> list[Step]:
            """The first request: a GOAWAY naming stream 5 while the others are in flight. On
            the drained connection, a stream it names is answered, one above it ignored."""
            conn = server.note(fields)
            if fields[":path"].endswith("/0"):
                server.first_conn[key(fields)] = conn
                return [0.4, goaway(5), answer(sid, b"first")]
            if server.first_conn.get(key(fields)) == conn and sid > 5:
                return []
            return [answer(sid, b"again")]

        def unprocessed(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming no stream; the connection stays open."""
            server.note(fields)
            return [goaway(0)]

        def upload(sid: int, fields: dict[str, str]) -> list[Step]:
            """A GOAWAY naming the stream as its request body still comes, then the answer."""
            server.note(fields)
            return [goaway(sid), 0.5, answer(sid, b"taken")]

        def late(sid: int, fields: dict[str, str]) -> list[Step]:
            server.note(fields)
            return [0.6, answer(sid, b"late!")]

        server.scripts["late"] = late
        server.scripts["upload"] = upload
        server.scripts["many"] = many
        server.scripts["unprocessed"] = unprocessed
        server.scripts.update(
            silent=silent, refusedafter=refused_after, resetafter=reset_after,
            refusedonce=refused_once,
        )  # fmt: skip
        server.scripts.update(
            queue=queue, errorafter=error_after, down=down, up=up, above=above, split=split,
            laterefusal=late_refusal, refused=refused, plain=plain,
        )  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def proxy(module_relaying: Callable[..., PrivateProxy]) -> PrivateProxy:
    return module_relaying("goawayatk", CONFIG)


@pytest.fixture(scope="module")
def timed(module_relaying: Callable[..., PrivateProxy]) -> PrivateProxy:
    """A proxy whose answers must begin within `ANSWER_S` (`--upstream-timeout`)."""
    return module_relaying("goawaytimed", CONFIG, "--upstream-timeout", str(ANSWER_S))


@pytest.fixture(scope="module")
def budgeted(module_relaying: Callable[..., PrivateProxy]) -> PrivateProxy:
    """A proxy whose entry admits `BUDGET` requests a minute."""
    return module_relaying("goawaybudget", BUDGETED)


def collect(client: H2Stream, sids: list[int], within: float = WITHIN) -> list[StreamOutcome]:
    """Read until every stream ended or was reset, at most `within` seconds."""
    deadline = time.monotonic() + within
    while not all(client.done(s) for s in sids) and time.monotonic() < deadline:
        if client._readable() or select.select([client.sock], [], [], 0.1)[0]:
            client._pump()
    return [client.outcomes[s] for s in sids]


def post(client: H2Stream, path: str) -> int:
    body = b"a body the proxy streams on"
    sid = client.open(h2_request(AUTHORITY, "POST", path, ("content-length", str(len(body)))))
    client.send_body(sid, [body])
    return sid


def get(client: H2Stream, path: str) -> int:
    return client.open(h2_request(AUTHORITY, "GET", path), True)


def shape(outcome: StreamOutcome) -> tuple[str | None, int, bool, int | None]:
    return (outcome.status, outcome.body_bytes, outcome.ended, outcome.reset_code)


def audit_paths(proxy: PrivateProxy, mark: int) -> list[tuple[str, Any, Any]]:
    time.sleep(0.4)
    return [
        (a["path"], a.get("status"), a.get("decision"))
        for a in proxy.view.audit_log.since(mark)
        if a.get("path")
    ]


def conns(upstream: Upstream, path: str) -> list[tuple[int, str]]:
    return upstream.calls.get(path, [])


@dataclass(frozen=True)
class Sent:
    """One request on a tunnel of its own, and what came of it."""

    path: str
    outcome: StreamOutcome
    took: float  # seconds from its sending to its end
    calls: list[tuple[int, str]]  # `conns`: each time it reached the upstream
    audit: list[tuple[str, Any, Any]]  # `audit_paths` since it was sent


def send_one(
    proxy: PrivateProxy, upstream: Upstream, name: str, send: Callable[[H2Stream, str], int] = get
) -> Sent:
    """`send` (a GET, or a streamed POST) to a path of its own named `name`."""
    path, mark = unique(name), proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        started = time.monotonic()
        (outcome,) = collect(client, [send(client, path)])
        took = time.monotonic() - started
    audit = audit_paths(proxy, mark)
    return Sent(path, outcome, took, conns(upstream, path), audit)


# -- the defects ---------------------------------------------------------------------------------


def test_requests_queued_behind_the_upstreams_stream_limit_go_on_a_new_connection(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    """D710: requests the proxy queued (SETTINGS_MAX_CONCURRENT_STREAMS) when the GOAWAY came
    were sent on the drained connection after it, where the upstream ignores them, and
    waited for the upstream to close it."""
    base = unique("queue")
    a, b, c = f"{base}/a", f"{base}/b", f"{base}/c"
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        first = get(client, a)
        time.sleep(0.4)  # the upstream's limit of one stream has come
        rest = [get(client, b), get(client, c)]
        started = time.monotonic()
        outcomes = collect(client, [first, *rest])
        took = time.monotonic() - started
    assert [shape(o) for o in outcomes] == [("200", 5, True, None), ("200", 5, True, None),
                                            ("200", 5, True, None)]  # fmt: skip
    assert took < 3.0
    drained = upstream.first_conn[base]
    assert conns(upstream, a) == [(drained, SECRET_HEADER)]
    for path in (b, c):  # each sent once, on a connection other than the drained one
        assert len(conns(upstream, path)) == 1
        assert conns(upstream, path)[0][0] != drained
        assert conns(upstream, path)[0][1] == SECRET_HEADER
    assert sorted(audit_paths(proxy, mark)) == [(p, 200, "allow") for p in (a, b, c)]


def test_an_error_goaway_after_a_graceful_one_fails_the_streams_it_had_left(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    """D711: a GOAWAY with an error after a graceful one is mitmproxy's as before: every
    stream fails at once (it did wait for the upstream to close, silent, up to 20 s)."""
    sent = send_one(proxy, upstream, "errorafter")
    assert sent.outcome.status == "502" and sent.outcome.ended
    assert sent.took < 3.0
    assert len(sent.calls) == 1  # named by the GOAWAY: not sent again
    assert sent.audit == [(sent.path, 502, "deny")]


# -- the attacks that held -----------------------------------------------------------------------


def test_a_second_goaway_naming_fewer_streams_sends_the_rest_once_more(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    base = unique("down")
    a, b = f"{base}/a", f"{base}/b"
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        sids = [get(client, a)]
        time.sleep(0.15)  # on the connection the first one opened
        sids.append(get(client, b))
        outcomes = collect(client, sids)
    assert [shape(o) for o in outcomes] == [("200", 5, True, None), ("200", 5, True, None)]
    drained = upstream.first_conn[base]
    assert [c for c, _ in conns(upstream, a)] == [drained]
    time.sleep(0.3)  # the drained connection reads the second request once the first's
    # script is done (the upstream's reads and writes are one thread): it ignores it
    assert sorted(c == drained for c, _ in conns(upstream, b)) == [False, True]
    assert sorted(audit_paths(proxy, mark)) == [(a, 200, "allow"), (b, 200, "allow")]


def test_a_goaway_whose_last_id_goes_up_gets_no_second_answer_to_the_client(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    path = unique("up")
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        (outcome,) = collect(client, [get(client, path)])
        time.sleep(0.6)  # the liar's answer on the drained connection comes meanwhile
        client.sock.settimeout(0.3)
        with contextlib.suppress(TimeoutError):
            client._pump()
    assert shape(outcome) == ("200", 5, True, None)  # the second connection's
    assert len(conns(upstream, path)) == 2
    assert audit_paths(proxy, mark) == [(path, 200, "allow")]


@pytest.mark.parametrize("name", ["above", "split"])
def test_a_goaway_naming_the_stream_lets_it_finish_and_the_next_goes_elsewhere(
    proxy: PrivateProxy, upstream: Upstream, name: str
) -> None:
    path, after = unique(name), unique("plain")
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        (first,) = collect(client, [get(client, path)])
        (second,) = collect(client, [get(client, after)])
    size = 16 if name == "above" else len(b"part one, part two")
    assert shape(first) == ("200", size, True, None)
    assert shape(second) == ("200", 5, True, None)
    assert conns(upstream, path)[0][0] != conns(upstream, after)[0][0]
    assert audit_paths(proxy, mark) == [(path, 200, "allow"), (after, 200, "allow")]


def test_a_refusal_after_the_answer_began_resets_the_stream_and_sends_nothing_again(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    sent = send_one(proxy, upstream, "laterefusal")
    outcome = sent.outcome
    assert outcome.status == "200" and not outcome.ended and outcome.reset_code is not None
    assert len(sent.calls) == 1
    assert [(p, s) for p, s, _ in sent.audit] == [(sent.path, 200)]


def test_a_request_refused_every_time_goes_twice_with_one_credential_each(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    sent = send_one(proxy, upstream, "refused")
    assert sent.outcome.status == "502" and sent.outcome.ended
    assert [auth for _, auth in sent.calls] == [SECRET_HEADER, SECRET_HEADER]
    assert sent.calls[0][0] == sent.calls[1][0]  # a refused stream leaves its connection open
    assert sent.audit == [(sent.path, 502, "deny")]


def test_a_streamed_post_refused_is_not_sent_again(proxy: PrivateProxy, upstream: Upstream) -> None:
    sent = send_one(proxy, upstream, "refused", post)
    assert sent.outcome.status == "502"
    assert len(sent.calls) == 1
    assert sent.audit == [(sent.path, 502, "deny")]


def test_a_named_stream_never_answered_on_a_drained_connection_ends_at_the_deadline(
    timed: PrivateProxy, upstream: Upstream
) -> None:
    """The drain does not outlive the answer deadline: the upstream named the stream (it
    processes it) and then says nothing and keeps the connection: a 504, sent once."""
    sent = send_one(timed, upstream, "silent")
    assert sent.outcome.status == "504" and sent.outcome.ended
    assert ANSWER_S <= sent.took < ANSWER_S + 2.5  # the sweep runs once a second
    assert len(sent.calls) == 1
    assert sent.audit == [(sent.path, 504, "deny")]
    timed.wait_idle()  # the drained connection is gone with it


def test_a_named_stream_refused_after_the_goaway_goes_once_more_on_a_new_connection(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    sent = send_one(proxy, upstream, "refusedafter")
    assert shape(sent.outcome) == ("200", 5, True, None)
    calls = sent.calls
    assert len(calls) == 2 and calls[0][0] != calls[1][0]  # not on the drained connection
    assert [auth for _, auth in calls] == [SECRET_HEADER, SECRET_HEADER]
    assert sent.audit == [(sent.path, 200, "allow")]


def test_a_named_stream_reset_with_an_error_after_the_goaway_is_a_502_sent_once(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    sent = send_one(proxy, upstream, "resetafter")
    assert sent.outcome.status == "502" and sent.outcome.ended
    assert len(sent.calls) == 1
    assert sent.audit == [(sent.path, 502, "deny")]


def test_a_request_sent_again_is_charged_once_against_the_requests_budget(
    budgeted: PrivateProxy, upstream: Upstream
) -> None:
    refused, plain, over = unique("refusedonce"), unique("plain"), unique("plain")
    mark = budgeted.view.audit_log.mark()
    with h2_client(budgeted, AUTHORITY, WITHIN) as client:
        outcomes = [collect(client, [get(client, p)])[0] for p in (refused, plain, over)]
    assert [o.status for o in outcomes] == ["200", "200", "429"]
    assert [len(conns(upstream, p)) for p in (refused, plain, over)] == [2, 1, 0]
    assert [(p, st) for p, st, _ in audit_paths(budgeted, mark)] == [
        (refused, 200), (plain, 200), (over, 429)
    ]  # fmt: skip


def test_a_goaway_amid_many_streams_finishes_the_named_and_sends_the_rest_once_more(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    base = unique("many")
    paths = [f"{base}/{i}" for i in range(8)]
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        sids = [get(client, paths[0])]
        time.sleep(0.15)  # the rest on the connection the first one opened
        sids += [get(client, p) for p in paths[1:]]
        outcomes = collect(client, sids)
    assert [o.status for o in outcomes] == ["200"] * 8
    assert [o.body_bytes for o in outcomes] == [5] * 8
    time.sleep(0.3)  # the drained connection reads (and ignores) the rest after the first
    drained = upstream.first_conn[base]
    went = [sorted(c == drained for c, _ in conns(upstream, p)) for p in paths]
    # h2 streams 1, 3 and 5 (named) answered there; 7 and above there (ignored) and again
    assert went == [[True]] * 3 + [[False, True]] * 5
    assert sorted(audit_paths(proxy, mark)) == [(p, 200, "allow") for p in paths]


def test_a_client_that_resets_while_the_second_connection_opens_sends_nothing_again(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    """D712: the second connection's TLS handshake waits a second; the client resets its
    stream meanwhile: the request does not go on it (it did, then was reset), the audit
    has its one line."""
    path = unique("unprocessed")
    mark, opened = proxy.view.audit_log.mark(), len(upstream.paths)
    upstream.handshake_delays[:] = [0.0, 1.0]
    try:
        with h2_client(proxy, AUTHORITY, WITHIN) as client:
            sid = get(client, path)
            time.sleep(0.4)  # the GOAWAY came; the second connection is in its handshake
            client.conn.reset_stream(sid, 0x8)  # CANCEL
            client._flush()
            time.sleep(1.5)  # the handshake is done
            (outcome,) = collect(client, [sid], within=0.5)
    finally:
        upstream.handshake_delays.clear()
    assert (outcome.status, outcome.body_bytes) == (None, 0)
    assert len(conns(upstream, path)) == 1
    assert len(upstream.paths) - opened == 2  # the second connection was opened, unused
    assert audit_paths(proxy, mark) == [(path, None, "allow")]  # the client's side failed
    proxy.wait_idle()


def test_the_named_streams_request_body_still_goes_on_the_drained_connection(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    """The GOAWAY names the stream while its (streamed) body is on its way: the rest of the
    body goes on (h2's connection stays open for it), whole, then the answer."""
    path = unique("upload")
    body = bytes(range(256)) * 128  # 32 KiB: within the upstream's window (no update)
    mark = proxy.view.audit_log.mark()
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        sid = client.open(h2_request(AUTHORITY, "POST", path, ("content-length", str(len(body)))))
        time.sleep(0.2)  # the GOAWAY came
        client.send_body(sid, [body[: len(body) // 2]], end=False)
        time.sleep(0.1)
        client.send_body(sid, [body[len(body) // 2 :]])
        (outcome,) = collect(client, [sid])
    assert shape(outcome) == ("200", 5, True, None)
    time.sleep(0.3)
    (frames,) = [f for f, p in zip(upstream.received, upstream.paths, strict=False) if path in p]
    sid_up = next(stream for kind, _f, stream, _p in frames if kind == 1)
    got = [(flags, payload) for kind, flags, stream, payload in frames
           if kind == 0 and stream == sid_up]  # fmt: skip
    assert b"".join(payload for _f, payload in got) == body
    assert got[-1][0] & 1  # END_STREAM
    assert len(conns(upstream, path)) == 1
    assert audit_paths(proxy, mark) == [(path, 200, "allow")]


def test_the_sandbox_clients_own_goaway_is_mitmproxys_as_before(
    proxy: PrivateProxy, upstream: Upstream
) -> None:
    """The drain is for upstreams only: a sandbox client's graceful GOAWAY to the proxy,
    its request in flight, is h2's and mitmproxy's (the connection ends, the request's
    upstream stream is reset), not a drain."""
    path = unique("late")
    mark = proxy.view.audit_log.mark()
    kinds: list[tuple[int, int]] = []  # (frame type, stream) the proxy sent after the GOAWAY
    with h2_client(proxy, AUTHORITY, WITHIN) as client:
        sid = get(client, path)
        time.sleep(0.2)  # the request is at the upstream
        client.conn.close_connection(0, last_stream_id=0)
        client._flush()  # h2 is CLOSED for the client now: what comes is read raw
        client.sock.settimeout(0.3)
        raw, deadline, ended = b"", time.monotonic() + 1.5, False
        while time.monotonic() < deadline and not ended:
            try:
                chunk = client.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            ended, raw = not chunk, raw + chunk
        while len(raw) >= 9 and len(raw) >= 9 + int.from_bytes(raw[:3]):
            size = int.from_bytes(raw[:3])
            kinds.append((raw[3], int.from_bytes(raw[5:9]) & 0x7FFFFFFF))
            raw = raw[9 + size :]
    assert ended  # the proxy ended the connection
    assert (1, sid) not in kinds  # no answer head for the stream
    time.sleep(0.6)  # the upstream's answer came and went nowhere
    (frames,) = [f for f, p in zip(upstream.received, upstream.paths, strict=False) if path in p]
    sid_up = next(stream for kind, _f, stream, _p in frames if kind == 1)
    resets = [
        struct.unpack(">I", p)[0] for k, _f, st, p in frames if k == RST_STREAM and st == sid_up
    ]
    assert resets == [INTERNAL_ERROR]  # mitmproxy's code for its client's connection error
    assert len(conns(upstream, path)) == 1
    assert audit_paths(proxy, mark) == [(path, None, "allow")]
