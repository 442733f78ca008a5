"""The protocol fuzzer: generated requests through the real proxy (issue 10; D34).

Hypothesis builds request heads, request-targets, Host headers, header blocks
(testbed/fuzz_strategies.py) and HTTP/2 header lists; each example is sent on a
connection of its own through the session's proxy to the recording upstream
(testbed/echo_server.py, which logs every request head as received). The property,
checked exactly on every example:

* refused: the proxy answered 403 with exactly one `X-Egress-Denied` reason code, or
  mitmproxy's own reader answered 400 without one, or the request got no answer at all
  (HTTP/2 stream or connection reset); and NOTHING new reached the upstream namespace,
  not even a TCP connect;
* allowed: the echo's 200, and exactly one upstream request, whose head is well-formed
  HTTP/1.1 (token method, origin-form target, one SP between the parts, every line CRLF
  terminated, token names, no control byte but HTAB in any value, no obs-fold), whose one
  Host names the decided host (and whose SNI does, over TLS), and which carries each
  transform header of the decided host exactly once, with the proxy's value.

The decided host is the tunnel's (CONNECT) host inside a tunnel; in the plain proxy mode,
the host of the request's audit line. `make test` runs a bounded, derandomized profile;
`EGRESS_FUZZ_EXAMPLES=N` runs N random examples per test (docs/decisions.md D34).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from testbed import fuzz_strategies as fz
from testbed.h2client import H2Result, exchange
from testbed.harness import REASONS, Harness
from testbed.rawhttp import Response

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]

LONG_RUN = int(os.environ.get("EGRESS_FUZZ_EXAMPLES", "0"))
IO_TIMEOUT = 5.0
API = fz.HOST
PLAIN = "plain.allowed.test"


def fuzz(bounded: int) -> Any:
    """The bounded profile (derandomized: the same examples every run) or the long one."""
    return settings(
        max_examples=LONG_RUN or bounded,
        deadline=None,
        derandomize=not LONG_RUN,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )


class Tail:
    """The lines appended to a JSON-lines file since it was opened (read by byte offset, so
    thousands of examples do not re-read a growing file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def new(self) -> list[dict[str, Any]]:
        with self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def wait_for(self, client: str, method: str, timeout: float = IO_TIMEOUT) -> dict[str, Any]:
        """The one audit line of `client`'s (ip:port) request; the audit writer is a thread
        of its own, so a line can land after the response, even after the next example's."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [
                r
                for r in self.new()
                if r["client"] == client and r["method"].upper() == method.upper()
            ]
            if lines or time.monotonic() > deadline:
                assert len(lines) == 1, lines
                return lines[0]
            time.sleep(0.01)

    def wait_requests(self, count: int, timeout: float = IO_TIMEOUT) -> list[dict[str, Any]]:
        """The new lines once `count` of them are requests (at once when `count` is 0)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.new()
            done = sum(line["event"] == "request" for line in lines) >= count
            if done or time.monotonic() > deadline:
                return lines
            time.sleep(0.01)

    def wait(self, count: int, timeout: float = IO_TIMEOUT) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(lines := self.new()) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return lines


@dataclass(frozen=True)
class Outcome:
    """What the sandbox got back: an HTTP status and reason code, or nothing."""

    status: int | None
    denied: list[str]
    echoed: bool  # the response came from the recording upstream
    detail: str


def http1_outcome(response: Response | None) -> Outcome:
    if response is None:
        return Outcome(None, [], False, "no response")
    return Outcome(
        response.status,
        response.header_all("X-Egress-Denied"),
        response.header("X-Echo-Server") == "e2e",
        response.describe(),
    )


# -- the property -----------------------------------------------------------------------------

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_ORIGIN_FORM = re.compile(rb"/[!-~]*")
_FORBIDDEN = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def refused(outcome: Outcome) -> bool:
    """A refusal the property accepts (D34); anything else must be the upstream's answer."""
    if outcome.status is None:
        return True
    if outcome.status == 403:
        assert len(outcome.denied) == 1, outcome.detail
        assert outcome.denied[0] in REASONS, outcome.detail
        return True
    if outcome.status == 502 and outcome.denied:  # D1: a name that does not resolve
        assert outcome.denied == ["dns_failure"], outcome.detail
        return True
    if outcome.status == 400 and outcome.denied == ["bad_request"]:
        return True  # mitmproxy's own reader refused it before any hook ran (D354: JSON)
    assert outcome.status == 200, f"neither refused nor relayed: {outcome}"
    assert outcome.echoed, f"neither refused nor relayed: {outcome}"
    return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def names_host(value: bytes, host: str, port: int) -> bool:
    """A Host value names `host`: US-ASCII, case aside, with no port or the decided one."""
    text = value.decode("latin-1").lower()
    name = f"[{host}]" if ":" in host else host
    return text in (name, f"{name}:{port}")


def assert_well_formed(head: bytes, methods: set[bytes]) -> list[tuple[bytes, bytes]]:
    """The head is well-formed HTTP/1.1 as RFC 9112 lets a proxy send it; its fields."""
    assert head.endswith(b"\r\n\r\n"), head
    lines = head[:-4].split(b"\r\n")
    assert not any(b"\r" in line or b"\n" in line for line in lines), head  # bare CR / LF
    request_line = lines[0].split(b" ")
    assert len(request_line) == 3, head
    sent_method, target, version = request_line
    assert _TOKEN.fullmatch(sent_method), head
    assert version == b"HTTP/1.1", head
    assert sent_method in methods, head
    if target == b"*":
        assert sent_method == b"OPTIONS", head
    else:
        assert _ORIGIN_FORM.fullmatch(target), head
        assert b"#" not in target, head
    fields = []
    for line in lines[1:]:
        assert line[:1] not in (b" ", b"\t"), head  # obs-fold
        name, colon, value = line.partition(b":")
        assert colon, head
        assert _TOKEN.fullmatch(name), head
        assert not _FORBIDDEN.search(value), head
        fields.append((name, value.strip(b" \t")))
    return fields


def assert_property(
    harness: Harness,
    outcome: Outcome,
    events: list[dict[str, Any]],
    method: bytes,
    decided: tuple[str, int] | None,
    tls: bool,
) -> None:
    """The fuzzer's property on one example (see the module docstring)."""
    if refused(outcome):
        assert events == [], f"refused ({outcome.detail}) yet reached the upstream: {events}"
        return
    requests = [e for e in events if e["event"] == "request"]
    assert len(requests) == 1, events
    assert len(events) == len(requests) + tls + 1, events
    assert decided is not None, events
    assert_upstream_request(harness, requests[0], {method}, decided, tls)


def assert_upstream_request(
    harness: Harness,
    record: dict[str, Any],
    methods: set[bytes],
    decided: tuple[str, int],
    tls: bool,
) -> None:
    """One request as the upstream received it: well-formed, naming only `decided`, with
    the decided host's transform headers exactly once."""
    host, port = decided
    fields = assert_well_formed(base64.b64decode(record["head_b64"]), methods)
    hosts = [v for n, v in fields if n.lower() == b"host"]
    assert len(hosts) == 1, (hosts, decided)
    assert names_host(hosts[0], host, port), (hosts, decided)
    if tls:  # RFC 6066 3: an IP literal is never sent as SNI
        assert record["sni"] == (None if _is_ip(host) else host), record
    secret, file_secret = harness.secrets
    transforms = {
        API: {b"authorization": f"Bearer {secret}", b"x-api-key": secret},
        PLAIN: {b"x-plain-token": file_secret},
    }.get(host, {})
    for name, value in transforms.items():
        assert [v for n, v in fields if n.lower() == name] == [value.encode()], name


# -- HTTP/1 inside a TLS tunnel to the transform host ------------------------------------------

NASTY_HTTP1 = [
    ("GET", "https://evil.test/x", [API.encode()], []),  # the fronting reproduction
    ("GET", "http://evil.test/x", [API.encode()], []),
    ("GET", "https://api.allowed.test@evil.test/x", [API.encode()], []),
    ("GET", "https://evil.test\\@api.allowed.test/x", [API.encode()], []),
    ("GET", "https://api.allowed.test:443/x", [API.encode()], []),
    ("GET", "https://API.ALLOWED.TEST./x", [API.encode()], []),
    ("GET", "/x", [API.encode(), b"evil.test"], []),  # duplicate Host
    ("GET", "/x", [b""], []),
    ("GET", "/x", [], []),
    ("GET", "/x", [b"\xef\xbd\x81pi.allowed.test"], []),  # fullwidth "a"
    ("GET", "/x", [API.encode()], [(b"X-A", b"b\rHost: evil.test")]),  # bare CR
    ("GET", "/x", [API.encode()], [(b"X-Fold", b"one\r\n Transfer-Encoding: chunked")]),
    ("GET", "/x", [API.encode()], [(b"X-Nul", b"a\x00b")]),
    ("GET", "/x", [API.encode()], [(b"X-A", b"a\nHost: evil.test")]),  # bare LF
    ("GET", "/x", [API.encode()], [(b"authorization", b"Bearer sandbox"), (b"X-API-KEY", b"k")]),
    ("GET", "/x", [API.encode()], [(b"X-Long", b"x" * 20000)]),
    ("OPTIONS", "*", [API.encode()], []),
    ("GET", "*", [API.encode()], []),
    ("GET(", "/x", [API.encode()], []),
]


def _with_examples(test: Any) -> Any:
    for method, target, hosts, fields in NASTY_HTTP1:
        test = example(method=method, target=target, hosts=hosts, fields=fields)(test)
    return test


@fuzz(bounded=400)
@given(
    method=fz.METHODS, target=fz.request_targets(), hosts=fz.HOST_HEADERS, fields=fz.HEADER_FIELDS
)
@_with_examples
def test_http1_requests_in_a_tunnel_are_refused_or_reach_the_upstream_clean(
    harness: Harness,
    method: str,
    target: str,
    hosts: list[bytes],
    fields: list[tuple[bytes, bytes]],
) -> None:
    head = fz.http1_head(method, target, hosts, fields)
    if not fz.one_request(head):
        return  # two requests on one connection: out of this property's scope
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443") as conn:
        conn.sock.settimeout(IO_TIMEOUT)
        try:
            conn.send(head)
            response: Response | None = harness.remember(conn.read_response(method.upper()))
        except (OSError, ConnectionError, ValueError):
            response = None
    outcome = http1_outcome(response)
    events = upstream.wait(3) if not refused(outcome) else upstream.new()
    assert_property(harness, outcome, events, method.encode(), (API, 443), tls=True)


# -- HTTP/1 to the proxy itself (absolute-form, plain HTTP) ------------------------------------

PLAIN_AUTHORITIES = [PLAIN, PLAIN.upper(), PLAIN + ".", PLAIN + ":80", "other.allowed.test"]


@st.composite
def plain_targets(draw: st.DrawFn) -> str:
    """Absolute-form targets sent to the proxy itself; an `https` one makes the proxy open
    TLS upstream. Not `https` to port 80: the echo there speaks plain HTTP, so the allowed
    request would wait on a handshake that never completes (a harness artifact)."""
    authority = draw(st.sampled_from(PLAIN_AUTHORITIES + fz.OTHER_SPELLINGS))
    scheme = draw(st.sampled_from(["http", "HTTP", "https"]))
    if scheme == "https" and authority.endswith(":80"):
        scheme = "http"
    return f"{scheme}://{authority}{draw(fz.PATHS)}"


@fuzz(bounded=150)
@given(
    method=fz.METHODS,
    target=plain_targets(),
    hosts=st.lists(
        st.sampled_from(PLAIN_AUTHORITIES + fz.OTHER_SPELLINGS).map(str.encode), max_size=2
    ),
    fields=fz.HEADER_FIELDS,
)
@example(method="GET", target="http://plain.allowed.test/x", hosts=[b"evil.test"], fields=[])
@example(method="GET", target="http://evil.test/x", hosts=[PLAIN.encode()], fields=[])
@example(method="GET", target="http://plain.allowed.test/x", hosts=[PLAIN.encode()], fields=[])
def test_plain_proxy_requests_are_refused_or_reach_the_upstream_clean(
    harness: Harness,
    method: str,
    target: str,
    hosts: list[bytes],
    fields: list[tuple[bytes, bytes]],
) -> None:
    head = fz.http1_head(method, target, hosts, fields)
    if not fz.one_request(head):
        return
    upstream, audit = Tail(harness.upstream_log.path), Tail(harness.audit_log.path)
    with harness.conn() as conn:
        client = "{}:{}".format(*conn.sock.getsockname())
        conn.sock.settimeout(IO_TIMEOUT)
        try:
            conn.send(head)
            response: Response | None = harness.remember(conn.read_response(method.upper()))
        except (OSError, ConnectionError, ValueError):
            response = None
    outcome = http1_outcome(response)
    decided = None
    events = upstream.new()
    if not refused(outcome):
        events = upstream.wait_requests(1)
        line = audit.wait_for(client, method)
        decided = (line["host"], line["port"])
    tls = target.lower().startswith("https:")
    assert_property(harness, outcome, events, method.encode(), decided, tls=tls)


# -- HTTP/2 inside a TLS tunnel to the transform host ------------------------------------------


def h2_outcome(result: H2Result, stream_id: int) -> Outcome:
    response = result.headers.get(stream_id, {})
    status = response.get(":status")
    return Outcome(
        int(status) if status is not None else None,
        [v for k, v in response.items() if k == "x-egress-denied"],
        response.get("x-echo-server") == "e2e",
        f"{response} {result.bodies.get(stream_id, b'')[:300]!r}",
    )


def _h2(
    path: str, authority: str | None = API, *extra: tuple[str, str]
) -> list[tuple[bytes, bytes]]:
    headers = [(":method", "GET"), (":scheme", "https"), (":path", path)]
    if authority is not None:
        headers.append((":authority", authority))
    return [(n.encode(), v.encode()) for n, v in headers + list(extra)]


@fuzz(bounded=300)
@given(headers=fz.h2_header_lists())
@example(headers=_h2("http://evil.test/x"))
@example(headers=_h2("https://api.allowed.test/x"))
@example(headers=_h2("/x", "evil.test"))
@example(headers=_h2("/x", API, ("host", "evil.test")))
@example(headers=_h2("/x", None, ("host", "evil.test")))
@example(headers=_h2("/x", None, ("host", API)))
@example(headers=_h2("/x", None))
@example(headers=_h2("/x", API, (":authority", "evil.test")))
@example(headers=_h2("/x", API, (":path", "http://evil.test/")))
@example(headers=_h2("/x", API, ("connection", "keep-alive")))
@example(headers=_h2("/x", API, ("transfer-encoding", "chunked")))
@example(headers=_h2("/x", API, ("te", "trailers")))
@example(headers=_h2("/x", API, ("authorization", "Bearer s"), ("x-api-key", "k")))
@example(headers=_h2("/x", API + ":8443"))
@example(headers=_h2("/x", "API.ALLOWED.TEST."))
def test_http2_requests_in_a_tunnel_are_refused_or_reach_the_upstream_clean(
    harness: Harness, headers: list[tuple[bytes, bytes]]
) -> None:
    method = next((v for n, v in headers if n == b":method"), b"GET")
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        conn.sock.settimeout(IO_TIMEOUT)
        result = exchange(conn.sock, [headers], timeout=IO_TIMEOUT, validate=False)
    outcome = h2_outcome(result, 1)
    events = upstream.wait(3) if not refused(outcome) else upstream.new()
    assert_property(harness, outcome, events, method, (API, 443), tls=True)


@fuzz(bounded=60)
@given(streams=st.lists(fz.h2_header_lists(), min_size=2, max_size=4))
@example(streams=[_h2("/s1"), _h2("http://evil.test/s2"), _h2("/s3", "evil.test"), _h2("/s4")])
@example(streams=[_h2("/s1", API, ("x-ctl", "a\x01b")), _h2("/s2", "API.ALLOWED.TEST.")])
def test_http2_streams_on_one_connection_are_each_refused_or_reach_the_upstream_clean(
    harness: Harness, streams: list[list[tuple[bytes, bytes]]]
) -> None:
    """Several streams on one connection, refused and allowed ones interleaved: every
    request the upstream receives is clean and names the tunnel's host; one per stream
    the sandbox saw answered by the upstream, and none for a stream refused by a code."""
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        conn.sock.settimeout(IO_TIMEOUT)
        result = exchange(conn.sock, streams, timeout=IO_TIMEOUT, validate=False)
    ids = [1 + 2 * i for i in range(len(streams))]
    outcomes = [h2_outcome(result, stream_id) for stream_id in ids]
    relayed = sum(not refused(outcome) for outcome in outcomes)
    unanswered = sum(outcome.status is None for outcome in outcomes)
    events = upstream.wait_requests(relayed)
    requests = [e for e in events if e["event"] == "request"]
    if relayed == 0 and unanswered == 0:
        assert events == [], (outcomes, events)
    elif unanswered:  # a connection error can end streams the upstream already answered
        assert relayed <= len(requests) <= relayed + unanswered, (outcomes, requests)
    else:
        assert len(requests) == relayed, (outcomes, requests)
    methods = {v for headers in streams for n, v in headers if n == b":method"}
    for record in requests:
        assert_upstream_request(harness, record, methods, (API, 443), tls=True)


# -- CONNECT authorities and SNIs ---------------------------------------------------------------

CONNECT_HOSTS = [*fz.HOST_SPELLINGS[:5], "other.allowed.test", "OTHER.allowed.test.", "evil.test"]
CONNECT_AUTHORITIES = st.sampled_from(
    [f"{h}:443" for h in CONNECT_HOSTS]
    + ["api.allowed.test", "api.allowed.test:8443", "ports.allowed.test:8443", "[::1]:443"]
    + ["198.18.1.2:443", "3323068674:443", "api.allowed.test:443@evil.test:443", ":443"]
    + ["user@api.allowed.test:443", "api.allowed.test:443 ", "api.allowed.test:00443"]
)
SNIS = st.sampled_from([None, "", API, "API.ALLOWED.TEST", "other.allowed.test", "evil.test"])


@fuzz(bounded=150)
@given(authority=CONNECT_AUTHORITIES, sni=SNIS, hosts=fz.HOST_HEADERS)
@example(authority=f"{API}:443", sni="evil.test", hosts=[API.encode()])
@example(authority=f"{API}:443", sni=None, hosts=[API.encode()])
@example(authority="other.allowed.test:443", sni=API, hosts=[API.encode()])
@example(authority="other.allowed.test:443", sni="other.allowed.test", hosts=[API.encode()])
@example(authority="198.18.1.2:443", sni=API, hosts=[API.encode()])
def test_connect_and_tls_names_are_refused_or_reach_the_upstream_clean(
    harness: Harness, authority: str, sni: str | None, hosts: list[bytes]
) -> None:
    """Any CONNECT authority, any SNI (`""`: the CONNECT host; None: no SNI), any Host: the
    decided host is the request's audit line's, and every name upstream must be it."""
    upstream, audit = Tail(harness.upstream_log.path), Tail(harness.audit_log.path)
    response: Response | None = None
    with harness.conn() as conn:
        client = "{}:{}".format(*conn.sock.getsockname())
        conn.sock.settimeout(IO_TIMEOUT)
        opened = harness.remember(conn.connect(authority))
        if opened.status != 200:
            response = opened
        else:
            ctx = harness.client_tls()
            ctx.check_hostname = False
            name = authority.rsplit(":", 1)[0].strip("[]") if sni == "" else sni
            try:
                conn.start_tls(ctx, name or None)
                conn.send(fz.http1_head("GET", "/connect-fuzz", hosts, []))
                response = harness.remember(conn.read_response())
            except (OSError, ConnectionError, ValueError):
                response = None  # the TLS handshake or the request was refused by a close
    outcome = http1_outcome(response)
    decided = None
    events = upstream.new()
    if not refused(outcome):
        events = upstream.wait(3)
        line = audit.wait_for(client, "GET")
        decided = (line["host"], line["port"])
    assert_property(harness, outcome, events, b"GET", decided, tls=True)


# -- what the fuzzer found on main (D35), pinned as plain tests ----------------------------------


@pytest.mark.parametrize(
    "hosts",
    [[], [b"\xef\xbd\x81pi.allowed.test"], [b"API.Allowed.Test."], [b"api.allowed.test:443"]],
    ids=["no-host", "fullwidth-a", "case-and-dot", "default-port"],
)
def test_http1_upstream_host_is_the_decided_host_spelled_canonically(
    harness: Harness, hosts: list[bytes]
) -> None:
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443") as conn:
        conn.send(fz.http1_head("GET", "/spelling", hosts, []))
        response = harness.remember(conn.read_response())

    assert response.status == 200, response.describe()
    (record,) = [e for e in upstream.wait(3) if e["event"] == "request"]
    assert [v for n, v in record["headers"] if n.lower() == "host"] == [API]


def test_http1_empty_host_is_bad_request(harness: Harness) -> None:
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443") as conn:
        conn.send(fz.http1_head("GET", "/empty-host", [b""], []))
        response = harness.remember(conn.read_response())

    assert (response.status, response.header_all("X-Egress-Denied")) == (403, ["bad_request"])
    assert upstream.new() == []


def test_plain_absolute_form_without_host_gets_the_decided_host(harness: Harness) -> None:
    upstream = Tail(harness.upstream_log.path)
    with harness.conn() as conn:
        conn.send(fz.http1_head("GET", "http://PLAIN.allowed.test./nohost", [], []))
        response = harness.remember(conn.read_response())

    assert response.status == 200, response.describe()
    (record,) = [e for e in upstream.wait(2) if e["event"] == "request"]
    assert [v for n, v in record["headers"] if n.lower() == "host"] == [PLAIN]


# (h2 itself refuses a `host` field that differs from :authority by a byte, and mitmproxy a
# non-ASCII :authority: no response, nothing upstream, on main already.)
@pytest.mark.parametrize("authority", ["API.ALLOWED.TEST.", f"{API}:443"])
def test_http2_upstream_host_is_the_decided_host_spelled_canonically(
    harness: Harness, authority: str
) -> None:
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [_h2("/h2-spelling", authority)], validate=False)

    assert result.status(1) == "200", result
    (record,) = [e for e in upstream.wait(3) if e["event"] == "request"]
    assert [v for n, v in record["headers"] if n.lower() == "host"] == [API]


@pytest.mark.parametrize("sni", [b"API.ALLOWED.TEST", b"api.allowed.test.", b"Api.Allowed.Test."])
def test_upstream_sni_is_the_decided_host_spelled_canonically(harness: Harness, sni: bytes) -> None:
    upstream = Tail(harness.upstream_log.path)
    with harness.tunnel(f"{API}:443", sni=sni, check_hostname=False) as conn:  # type: ignore[arg-type]
        response = harness.remember(conn.request("GET", "/sni-spelling", [("Host", API)]))

    assert response.status == 200, response.describe()
    (record,) = [e for e in upstream.wait(3) if e["event"] == "request"]
    assert record["sni"] == API
