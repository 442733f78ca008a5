"""Protocol fuzzer: hostile requests through the real proxy to a recording upstream (issue 10).

Each example opens its own connection and sends one generated request: an HTTP/1.1
head written byte for byte, or one HTTP/2 HEADERS block sent with the h2 library's
validation off, inside CONNECT api.allowed.test:443 + TLS (trusting the proxy CA); an
absolute-form head to plain.allowed.test; or a CONNECT to a generated authority, then
TLS and a GET with the same spelling. Then the property of testbed/fuzz_property.py
(docs/decisions.md D36) is checked against what the upstream logged.

After every example a barrier request (plain HTTP to other.allowed.test) runs before the
upstream log is read, so that whatever the example made the proxy send is in the log.

`make test` runs a bounded, derandomized profile; `EGRESS_FUZZ_EXAMPLES=N` runs N
random examples per test instead (docs/operations.md, "Fuzzing the proxy like an attacker").
"""

from __future__ import annotations

import itertools
import json
import os
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

import h2.config as h2_config
import h2.connection as h2_connection
import h2.events as h2_events
import h2.exceptions as h2_exceptions
import pytest
from hypothesis import HealthCheck, example, given, settings

from testbed.attack_strategies import (
    DECIDED,
    PLAIN,
    Field,
    Head,
    connect_authorities,
    h2_header_lists,
    plain_heads,
    request_heads,
)
from testbed.fuzz_property import (
    Expected,
    check_upstream_request,
    denied_reason,
    is_address,
)
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP
from testbed.rawhttp import Conn, Response
from tests.e2e.conftest import PROXY_HOSTS

pytestmark = pytest.mark.both_paths

TIMEOUT = 5.0
LONG_RUN = int(os.environ.get("EGRESS_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=LONG_RUN or 200,
    derandomize=not LONG_RUN,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
_barriers = itertools.count()


def offset_of(log: JsonLines) -> int:
    """A byte offset into an event log (JsonLines.mark re-reads the whole file each time,
    which a run of thousands of examples cannot afford)."""
    return log.path.stat().st_size


def since(log: JsonLines, offset: int) -> list[dict[str, Any]]:
    """The complete lines written after `offset`."""
    with log.path.open("rb") as file:
        file.seek(offset)
        data = file.read()
    complete = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()]


def in_tunnel(harness: Harness) -> Expected:
    secret = harness.secrets[0]
    injected = {"Authorization": f"Bearer {secret}", "X-Api-Key": secret}
    return Expected(DECIDED, 443, True, injected, f"{UPSTREAM_IP}:443")


def in_plain(harness: Harness) -> Expected:
    injected = {"X-Plain-Token": harness.secrets[1]}
    return Expected(PLAIN, 80, False, injected, f"{UPSTREAM_IP}:80")


def barrier(harness: Harness) -> str:
    """A clean plain request; once it is logged, what the example made the proxy send is too."""
    path = f"/fuzz-barrier-{next(_barriers)}"
    with harness.conn() as conn:
        head = [("Host", "other.allowed.test"), ("Connection", "close")]
        response = conn.request("GET", f"http://other.allowed.test{path}", head)
    assert response.status == 200, response.describe()
    return path


class Watched(Protocol):
    """Where the upstream and the traps log (a Harness, or the transparent stage's view)."""

    upstream_log: JsonLines
    trap_log: JsonLines


def reached(
    harness: Watched, mark: int, make_barrier: Callable[[Any], str] = barrier
) -> list[dict[str, Any]]:
    """Upstream events since `mark`, after a barrier and without the barrier's connection.
    A connection is its listener and peer: the proxy's connection to another listener may
    have the same source port as the barrier's (the kernel reuses a freed port for another
    destination), and the example's request was then dropped with the barrier's."""
    path = make_barrier(harness)
    events = since(harness.upstream_log, mark)
    barriers = {(e["listener"], e["peer"]) for e in events if e.get("target") == path}
    assert len(barriers) == 1, f"barrier {path} not logged: {events}"
    return [e for e in events if (e["listener"], e["peer"]) not in barriers]


def judge(
    harness: Watched,
    marks: tuple[int, int],
    outcome: tuple[bool, str | None],
    expected: Expected,
    make_barrier: Callable[[Any], str] = barrier,
) -> None:
    """The fuzzer's property, for one example whose outcome (echoed?, reason) the client saw."""
    echoed, reason = outcome
    events = reached(harness, marks[0], make_barrier)
    requests = [e for e in events if e["event"] == "request"]
    traps = since(harness.trap_log, marks[1]) + [e for e in events if e["event"] == "trap"]
    assert traps == [], f"reached a trap: {traps}"
    if reason is not None and reason != "upstream_tls":
        assert events == [], f"refused ({reason}) yet reached the upstream: {events}"
        return
    if not echoed:
        # No answer from the echo and no policy refusal: refused below the hooks (D21), or
        # allowed and then failed upstream (`upstream_tls`, D101). A connection to the
        # decided upstream may have opened; no request may have reached it (D36).
        assert requests == [], f"no answer, yet the upstream received {requests}"
        stray = [e for e in events if e["listener"] != expected.listener]
        assert stray == [], f"no answer, yet another listener was reached: {stray}"
        return
    assert len(requests) == 1, f"one request echoed, the upstream logged {requests}"
    check_upstream_request(requests[0], expected)


def open_tunnel(harness: Harness, alpn: list[str], sni: str | None = DECIDED) -> Conn:
    conn = Conn(harness.proxy_host, harness.proxy_port, timeout=TIMEOUT)
    response = conn.connect(f"{DECIDED}:443")
    assert response.status == 200, response.describe()
    context = harness.client_tls(alpn)
    context.check_hostname = sni == DECIDED
    conn.start_tls(context, sni)
    return conn


def outcome_of(response: Response | None, method: bytes) -> tuple[bool, str | None]:
    """(answered by the echo upstream, refusal reason) of an HTTP/1 exchange."""
    if response is None:
        return False, None  # closed or reset without an answer: a protocol-level refusal
    reason = denied_reason(response.headers, response.body, method != b"HEAD")
    return response.header("X-Echo-Server") == "e2e", reason


def exchange_http1(conn: Conn, head: Head) -> Response | None:
    try:
        conn.send(head.wire())
        return conn.read_response(head.method.decode("latin-1"))
    except (OSError, ConnectionError, ValueError, ssl.SSLError):
        return None


# -- HTTP/1.1 inside the tunnel ---------------------------------------------------------------


def send_head(harness: Harness, head: Head, sni: str | None = DECIDED) -> None:
    marks = offset_of(harness.upstream_log), offset_of(harness.trap_log)
    with open_tunnel(harness, ["http/1.1"], sni) as conn:
        response = exchange_http1(conn, head)
    judge(harness, marks, outcome_of(response, head.method), in_tunnel(harness))


def _head(method: bytes, target: bytes, hosts: list[bytes], *fields: Field) -> Head:
    return Head(method, target, hosts, list(fields))


HOST = b"Host: " + DECIDED.encode()


@pytest.mark.slow
@FUZZ
@given(head=request_heads())
@example(head=_head(b"GET", b"https://evil.test/x", [HOST]))  # issue 10 item 1
@example(head=_head(b"GET", b"http://evil.test/x", [HOST]))
@example(head=_head(b"GET", b"https://api.allowed.test@evil.test/x", [HOST]))
@example(head=_head(b"GET", b"//evil.test/x", [HOST]))
@example(head=_head(b"GET", b"/x", [HOST, b"Host: evil.test"]))
@example(head=_head(b"GET", b"/x", [HOST], Field(b"X-A", b"a\rb")))  # issue 10 item 4
@example(head=_head(b"GET", b"/x", [HOST], Field(b"X-A", b"a\r\n b")))
@example(head=_head(b"GET", b"/x", [HOST], Field(b"X-A", b"a\x00b")))
@example(head=_head(b"GET", b"/x", [HOST], Field(b"X-A", b"a\nHost: evil.test")))
@example(head=_head(b"GET", b"/x", [HOST], Field(b"Authorization", b"Bearer mine")))
@example(head=_head(b"OPTIONS", b"*", [HOST]))
def test_http1_heads_in_a_transform_tunnel(harness: Harness, head: Head) -> None:
    send_head(harness, head)


# -- HTTP/2 inside the tunnel -----------------------------------------------------------------


def h2_send(harness: Harness, headers: list[tuple[bytes, bytes]]) -> tuple[bool, str | None]:
    """One stream, headers as given; (answered by the echo, refusal reason)."""
    with open_tunnel(harness, ["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        client = h2_connection.H2Connection(
            h2_config.H2Configuration(
                client_side=True,
                header_encoding=None,
                validate_outbound_headers=False,
                normalize_outbound_headers=False,
                validate_inbound_headers=False,
            )
        )
        client.initiate_connection()
        try:
            client.send_headers(1, headers, end_stream=True)
        except h2_exceptions.H2Error:
            return False, None  # h2 cannot encode it even unvalidated: nothing was sent
        conn.sock.sendall(client.data_to_send())
        status: dict[bytes, bytes] = {}
        body = b""
        deadline = time.monotonic() + TIMEOUT
        try:
            while time.monotonic() < deadline:
                data = conn.sock.recv(65536)
                if not data:
                    break
                done = False
                for event in client.receive_data(data):
                    if isinstance(event, h2_events.ResponseReceived):
                        status = dict(event.headers)
                    elif isinstance(event, h2_events.DataReceived):
                        body += event.data
                        client.acknowledge_received_data(event.flow_controlled_length, 1)
                    elif isinstance(
                        event,
                        h2_events.StreamEnded
                        | h2_events.StreamReset
                        | h2_events.ConnectionTerminated,
                    ):
                        done = True
                conn.sock.sendall(client.data_to_send())
                if done:
                    break
        except (OSError, ssl.SSLError, h2_exceptions.H2Error):
            pass
    fields = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in status.items()]
    reason = denied_reason(fields, body) if status else None
    return status.get(b"x-echo-server") == b"e2e", reason


def _h2(path: bytes, authority: bytes = DECIDED.encode(), *extra: tuple[bytes, bytes]) -> Any:
    return [(b":method", b"GET"), (b":scheme", b"https"), (b":path", path),
            (b":authority", authority), *extra]  # fmt: skip


@pytest.mark.slow
@FUZZ
@given(headers=h2_header_lists())
@example(headers=_h2(b"http://evil.test/x"))  # issue 10 item 1, HTTP/2
@example(headers=_h2(b"https://evil.test/x"))
@example(headers=_h2(b"/x", b"evil.test"))
@example(headers=_h2(b"/x", DECIDED.encode(), (b"host", b"evil.test")))
@example(headers=_h2(b"/x", DECIDED.encode(), (b":authority", b"evil.test")))
@example(headers=_h2(b"/x", DECIDED.encode(), (b"x-a", b"a\r\nhost: evil.test")))
@example(headers=_h2(b"/x", DECIDED.encode(), (b"x-a", b"a\x00b")))
@example(headers=_h2(b"/x", DECIDED.encode(), (b"connection", b"keep-alive")))
@example(headers=_h2(b"/x", DECIDED.encode(), (b"transfer-encoding", b"chunked")))
def test_http2_header_blocks_in_a_transform_tunnel(
    harness: Harness, headers: list[tuple[bytes, bytes]]
) -> None:
    marks = offset_of(harness.upstream_log), offset_of(harness.trap_log)
    judge(harness, marks, h2_send(harness, headers), in_tunnel(harness))


def test_the_property_accepts_a_clean_request(harness: Harness) -> None:
    """The checker itself: a plain GET passes and is echoed (a fuzzer that refuses all is void)."""
    mark = offset_of(harness.upstream_log)
    send_head(harness, _head(b"GET", b"/fuzz-clean", [HOST]))
    records = [e for e in since(harness.upstream_log, mark) if e["event"] == "request"]
    assert [r["target"] for r in records if "barrier" not in r["target"]] == ["/fuzz-clean"]


# -- plain HTTP through the proxy (regular mode, absolute-form to a transform entry) ---------


@pytest.mark.slow
@FUZZ
@given(head=plain_heads())
@example(head=_head(b"GET", b"http://plain.allowed.test/x", [b"Host: evil.test"]))
@example(head=_head(b"GET", b"http://plain.allowed.test/x", [b"Host: plain.allowed.test"] * 2))
@example(
    head=_head(
        b"GET",
        b"http://plain.allowed.test/x",
        [b"Host: plain.allowed.test"],
        Field(b"X-A", b"a\r\n b"),
    )  # fmt: skip
)
def test_plain_heads_to_a_transform_entry(harness: Harness, head: Head) -> None:
    marks = offset_of(harness.upstream_log), offset_of(harness.trap_log)
    with Conn(harness.proxy_host, harness.proxy_port, timeout=TIMEOUT) as conn:
        response = exchange_http1(conn, head)
    judge(harness, marks, outcome_of(response, head.method), in_plain(harness))


# -- SNI spellings inside the tunnel (what Python's TLS client can put in a ClientHello) -----

# "api.allowed.test." was an open finding until D35 spelled the upstream SNI canonically.
SNI_SPELLINGS = [None, "API.ALLOWED.TEST", "api.allowed.test.", "evil.test",
                 "other.allowed.test", "x.wild.test"]  # fmt: skip


@pytest.mark.parametrize("sni", SNI_SPELLINGS)
def test_sni_spellings_in_a_transform_tunnel(harness: Harness, sni: str | None) -> None:
    mark = offset_of(harness.upstream_log)
    try:
        send_head(harness, _head(b"GET", b"/fuzz-sni", [HOST]), sni)
    except (ssl.SSLError, ConnectionError):
        # The handshake itself was refused: nothing may have reached the upstream.
        assert reached(harness, mark) == []


# -- CONNECT authorities: a consistent sandbox (same spelling in CONNECT, SNI and Host) ------

# Where a tunnel may lead: the names that resolve to the echo upstream (among others: the
# proxy uses the checked address, test_proxy_e2e.py), and its address.
UPSTREAM_NAMES = {n for n, ips in PROXY_HOSTS.items() if UPSTREAM_IP in ips} | {UPSTREAM_IP}


def split_authority(authority: str) -> tuple[str, int]:
    """(host without brackets, port; 443 when none is readable) of a CONNECT authority."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = authority.rpartition(":")
        if not sep:
            host, port = authority, ""
    return host, int(port) if port.isdigit() else 443


@pytest.mark.slow
@FUZZ
@given(authority=connect_authorities())
@example(authority=b"2130706433:443")
@example(authority=b"[::ffff:127.0.0.1]:443")
@example(authority=b"api.allowed.test@evil.test:443")
@example(authority=b"API.ALLOWED.TEST:443")
@example(authority=b"198.18.1.2:443")
def test_connect_authorities(harness: Harness, authority: bytes) -> None:
    marks = offset_of(harness.upstream_log), offset_of(harness.trap_log)
    text = authority.decode("latin-1")
    host, port = split_authority(text)
    response: Response | None = None
    with Conn(harness.proxy_host, harness.proxy_port, timeout=TIMEOUT) as conn:
        try:
            opened = conn.connect(text)
        except (OSError, ConnectionError, ValueError):
            opened = None
        if opened is not None and opened.status == 200:
            context = harness.client_tls(["http/1.1"])
            context.check_hostname = False
            sni = None if is_address(host) else host
            try:
                conn.start_tls(context, sni)
            except (ssl.SSLError, OSError, ValueError, UnicodeError):
                listener = f"{UPSTREAM_IP}:{port}"
                judge(harness, marks, (False, None), Expected(host, port, True, {}, listener))
                return
            head = Head(b"GET", b"/fuzz-connect", [b"Host: " + host.encode("latin-1")], [])
            response = exchange_http1(conn, head)
        else:
            response = opened
    echoed, reason = outcome_of(response, b"GET")
    decided = host.lower()
    if not echoed:
        listener = f"{UPSTREAM_IP}:{port}"
        judge(harness, marks, (echoed, reason), Expected(decided, port, True, {}, listener))
        return
    assert decided in UPSTREAM_NAMES, f"CONNECT {text!r} led to the upstream"
    injected = {DECIDED: in_tunnel(harness).transforms, PLAIN: in_plain(harness).transforms}
    expected = Expected(decided, port, True, injected.get(decided, {}), f"{UPSTREAM_IP}:{port}")
    judge(harness, marks, (echoed, reason), expected)
    if not expected.transforms:
        raw = since(harness.upstream_log, marks[0])
        assert not any(secret in json.dumps(raw) for secret in harness.secrets), text
