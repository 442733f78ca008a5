"""End to end: the sandbox gets the HTTP version the upstream would have chosen (issue 13).

With `connection_strategy=lazy`, mitmproxy used to answer the client's TLS handshake
before any upstream existed, picking the first protocol of the client's ALPN list: a
client offering `http/1.1, h2` in that order (httpx with `http2=True`) got HTTP/1.1 from
an HTTP/2 upstream, and a client offering `h2` first got HTTP/2 from an upstream that
only speaks HTTP/1.1. Once the CONNECT target is decided and pinned, the proxy completes
the upstream handshake first (still connecting only after the decision, to the pinned
address) and gives the client the upstream's choice (docs/decisions.md D19).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import nginx, nsock
from testbed.expect import header_values
from testbed.h2client import H2Result, exchange
from testbed.harness import Harness, JsonLines, TunnelRefused
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from testbed.transparent import DECOY_IP, OPEN_IP, REAL_IP
from tests.e2e.conftest import _start_and_wait
from tests.e2e.test_transparent_e2e import Seen, Transparent, listener, seen, tp

pytestmark = pytest.mark.netns
__all__ = ["seen", "tp"]  # fixtures, imported so that pytest finds them here

H2_ECHO = ["-m", "testbed.h2_echo"]
H2_PORT = 9446  # 9443 is the redaction tests' HTTP/2 upstream
# nginx without HTTP/2 on HTTP11_PORT (its other listeners: 9447 HTTPS+h2, 9083 HTTP);
# the client suite's nginx uses 9444 and 9081.
HTTP11_PORT, NGINX_PORTS = 9448, (9447, 9083)


@pytest.fixture(scope="module")
def h2_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    """An HTTP/2-preferring HTTPS upstream on UPSTREAM_IP:9446 (names: *.allowed.test)."""
    log, ready = e2e_dir / "alpn-h2.jsonl", e2e_dir / "alpn-h2.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, *H2_ECHO, "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{H2_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("alpn-h2", argv, e2e_dir, ready)
    try:
        yield JsonLines(log)
    finally:
        child.stop()


@pytest.fixture(scope="module")
def http11_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[nginx.Nginx]:
    """nginx with an HTTPS listener that does not speak HTTP/2 (UPSTREAM_IP:9448)."""

    def accepting() -> bool:
        try:
            nsock.connect(topology.ns_upstream, (UPSTREAM_IP, HTTP11_PORT), timeout=1).close()
        except OSError:
            return False
        return True

    content = e2e_dir / "alpn-nginx-content"
    content.mkdir(exist_ok=True)
    server = nginx.start(
        topology.exec_prefix(topology.ns_upstream), e2e_dir / "alpn-nginx", content,
        UPSTREAM_IP, NGINX_PORTS, pki.server_cert, pki.server_key, e2e_dir, accepting,
        http11_port=HTTP11_PORT,
    )  # fmt: skip
    try:
        yield server
    finally:
        server.child.stop()


def h2_get(harness: Harness, authority: str, alpn: list[str], path: str) -> H2Result:
    """One HTTP/2 GET through a tunnel whose client offers `alpn`; the proxy must speak h2."""
    with harness.tunnel(authority, alpn=alpn) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"
        return exchange(
            conn.sock,
            [[(":method", "GET"), (":scheme", "https"), (":authority", authority),
              (":path", path)]],
        )  # fmt: skip


def test_h2_only_client_gets_h2_from_the_proxy_to_an_http11_upstream(
    harness: Harness, http11_upstream: nginx.Nginx
) -> None:
    """A client offering only `h2` (h2load, gRPC) to an upstream without HTTP/2: the
    upstream is offered `http/1.1` too (D82), the client keeps HTTP/2 with the proxy."""
    mark = http11_upstream.mark()
    authority = f"other.allowed.test:{HTTP11_PORT}"
    result = h2_get(harness, authority, ["h2"], "/proto")
    assert result.status(1) == "200"
    assert result.bodies[1] == b"HTTP/1.1\n"
    entries = http11_upstream.since(mark)
    assert [(e["uri"], e["proto"], e["alpn"], e["sni"], e["status"]) for e in entries] == [
        ("/proto", "HTTP/1.1", "http/1.1", "other.allowed.test", 200)
    ]


def test_h2_only_client_still_gets_h2_from_an_h2_upstream(
    harness: Harness, h2_upstream: JsonLines
) -> None:
    """Offered `h2, http/1.1` for an `h2`-only client (D82), an HTTP/2 upstream picks `h2`."""
    mark = h2_upstream.mark()
    authority = f"other.allowed.test:{H2_PORT}"
    result = h2_get(harness, authority, ["h2"], "/h2-only")
    assert result.status(1) == "200"
    assert json.loads(result.bodies[1])["version"] == "h2"
    events = h2_upstream.wait_count(mark, 2)
    assert [(e["event"], e.get("alpn")) for e in events] == [("tls", "h2"), ("request", None)]


def test_http11_first_client_gets_h2_from_an_h2_upstream(
    harness: Harness, h2_upstream: JsonLines
) -> None:
    """httpx's order (`http/1.1, h2`) used to get HTTP/1.1 from an HTTP/2 upstream."""
    mark = h2_upstream.mark()
    authority = f"other.allowed.test:{H2_PORT}"
    result = h2_get(harness, authority, ["http/1.1", "h2"], "/alpn")
    assert result.status(1) == "200"
    assert json.loads(result.bodies[1])["version"] == "h2"
    events = h2_upstream.wait_count(mark, 2)
    assert [(e["event"], e.get("alpn")) for e in events] == [("tls", "h2"), ("request", None)]
    assert events[0]["sni"] == "other.allowed.test"


def test_h2_first_client_gets_http11_from_an_http11_upstream(harness: Harness) -> None:
    """curl's order (`h2, http/1.1`) to an HTTP/1.1-only upstream: the client speaks
    HTTP/1.1, as it would have directly, and the injected request still arrives."""
    mark = harness.upstream_log.mark()
    with harness.tunnel("api.allowed.test:443", alpn=["h2", "http/1.1"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "http/1.1"
        response = conn.request("GET", "/alpn-http11", [("Host", "api.allowed.test")])
    assert response.status == 200
    requests = harness.upstream_requests_since(mark)
    assert [r["target"] for r in requests] == ["/alpn-http11"]
    authorization = [v for n, v in requests[0]["headers"] if n.lower() == "authorization"]
    assert authorization == [f"Bearer {harness.secrets[0]}"]


def test_refused_connect_opens_no_upstream_connection(
    harness: Harness, h2_upstream: JsonLines
) -> None:
    """Completing the upstream handshake first happens only after an allow: a refused
    CONNECT (a port the entry does not allow) never reaches any upstream."""
    mark, echo_mark = h2_upstream.mark(), harness.upstream_log.mark()
    with (
        pytest.raises(TunnelRefused) as refused,
        harness.tunnel(f"ports.allowed.test:{H2_PORT}", alpn=["http/1.1", "h2"]),
    ):
        pass
    assert refused.value.response.status == 403
    assert refused.value.response.header("X-Egress-Denied") == "port_not_allowed"
    assert h2_upstream.since(mark) == []
    assert harness.upstream_log.since(echo_mark) == []


def test_sni_naming_another_host_is_not_sent_upstream_first(
    harness: Harness, h2_upstream: JsonLines
) -> None:
    """A ClientHello whose SNI disagrees with the CONNECT target gets no early upstream
    handshake (the upstream would see the foreign SNI); its requests are `host_mismatch`."""
    mark = h2_upstream.mark()
    authority = f"other.allowed.test:{H2_PORT}"
    with harness.tunnel(authority, sni="x.wild.test", alpn=["http/1.1"]) as conn:
        response = conn.request("GET", "/fronted", [("Host", "other.allowed.test")])
    assert response.status == 403
    assert response.header("X-Egress-Denied") == "host_mismatch"
    assert h2_upstream.since(mark) == []


# -- transparent mode: the SNI's host is decided and pinned at the ClientHello -----------


def test_transparent_client_gets_the_upstreams_choice(tp: Transparent, seen: Seen) -> None:
    """Aimed at a decoy, `h2, http/1.1` offered: the proxy completes the handshake with
    what api.t.test resolves to (HTTP/1.1 only) first, so the client speaks HTTP/1.1."""
    with tp.tls(DECOY_IP, "api.t.test", alpn=["h2", "http/1.1"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "http/1.1"  # type: ignore[attr-defined]
        response = tp.request(conn, "api.t.test", "/tp-alpn")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert record["target"] == "/tp-alpn"
    assert header_values(record, "Authorization") == [f"Bearer {tp.secret}"]


def test_transparent_refused_sni_opens_no_upstream_connection(tp: Transparent, seen: Seen) -> None:
    """A name no entry allows is never connected to first: the client gets the proxy's
    own handshake (HTTP/2, its first offer) and the readable refusal."""
    with tp.tls(REAL_IP, "notlisted.t.test", alpn=["h2", "http/1.1"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [[(":method", "GET"), (":scheme", "https"), (":authority", "notlisted.t.test"),
              (":path", "/tp-refused")]],
        )  # fmt: skip

    assert result.status(1) == "403"
    assert result.headers[1]["x-egress-denied"] == "not_allowlisted"
    seen.assert_nothing_reached()


@pytest.fixture(scope="module")
def tp_http11_upstream(tp: Transparent) -> Iterator[nginx.Nginx]:
    """nginx without HTTP/2 on OPEN_IP:9448 in the transparent topology (an address the
    IP/CIDR entry opens for any port), with the certificate of its other upstreams
    (written next to the upstream CA; it names OPEN_IP)."""

    def accepting() -> bool:
        try:
            nsock.connect(tp.topo.ns_upstream, (OPEN_IP, HTTP11_PORT), timeout=1).close()
        except OSError:
            return False
        return True

    pki_dir = tp.upstream_ca.parent
    work = pki_dir.parent / "alpn-nginx"
    content = pki_dir.parent / "alpn-nginx-content"
    content.mkdir(exist_ok=True)
    server = nginx.start(
        tp.topo.exec_prefix(tp.topo.ns_upstream), work, content, OPEN_IP, NGINX_PORTS,
        pki_dir / "server.pem", pki_dir / "server-key.pem", pki_dir.parent, accepting,
        http11_port=HTTP11_PORT,
    )  # fmt: skip
    try:
        yield server
    finally:
        server.child.stop()


def test_transparent_h2_only_client_gets_h2_to_an_http11_upstream(
    tp: Transparent, seen: Seen, tp_http11_upstream: nginx.Nginx
) -> None:
    """Transparent mode, one offer (`h2`), no SNI (the IP/CIDR entry decides): the proxy's
    own handshake gives HTTP/2, and the upstream without HTTP/2 is offered `http/1.1`
    too (D82) instead of refusing the handshake."""
    mark, authority = tp_http11_upstream.mark(), f"{OPEN_IP}:{HTTP11_PORT}"
    with tp.tls(OPEN_IP, None, port=HTTP11_PORT, alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [[(":method", "GET"), (":scheme", "https"), (":authority", authority),
              (":path", "/proto")]],
        )  # fmt: skip
    assert result.status(1) == "200", result.headers[1]
    assert result.bodies[1] == b"HTTP/1.1\n"
    entries = tp_http11_upstream.since(mark)
    assert [(e["uri"], e["proto"], e["alpn"], e["sni"], e["status"]) for e in entries] == [
        ("/proto", "HTTP/1.1", "http/1.1", "", 200)
    ]
    seen.assert_nothing_reached()  # nothing else: no echo listener, raw listener or trap


# -- QUIC's names over TCP (D305) ---------------------------------------------------------


@pytest.mark.parametrize("alpn", [["h3", "http/1.1"], ["h3"], ["h3-29", "h3"]])
def test_an_http3_name_offered_over_tcp_is_never_chosen(harness: Harness, alpn: list[str]) -> None:
    """`h3` means HTTP/3 over QUIC; offered inside a TCP tunnel it used to be chosen (the
    client's first HTTP name) and sent the connection to the HTTP/3 layers, which crashed
    it with no answer. The proxy now neither picks nor forwards it: the client speaks
    HTTP/1.1 (its other offer, or none), and the request is decided as any other."""
    mark = harness.upstream_log.mark()
    with harness.tunnel("api.allowed.test:443", alpn=alpn) as conn:
        chosen = conn.sock.selected_alpn_protocol()
        response = conn.request("GET", "/alpn-h3", [("Host", "api.allowed.test")])
    assert (chosen, response.status) == ("http/1.1" if "http/1.1" in alpn else None, 200)
    requests = harness.upstream_requests_since(mark)
    assert [r["target"] for r in requests] == ["/alpn-h3"]
    authorization = [v for n, v in requests[0]["headers"] if n.lower() == "authorization"]
    assert authorization == [f"Bearer {harness.secrets[0]}"]
