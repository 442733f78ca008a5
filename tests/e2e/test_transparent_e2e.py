"""End to end, transparent mode (docs/configuration.md#destinations-always-refused; docs/configuration.md#modes-and-protocols; issue 3): a sandbox that knows nothing of
the proxy, routed through a gateway whose firewall (docs/operations.md, word for word)
redirects every TCP connection to `egress-proxy run --mode transparent`.

The sandbox is the adversary: it aims connections at addresses of its choosing (a decoy,
an address an IP/CIDR entry opens, the gateway itself), sends SNI and Host headers that
disagree, leaves SNI out, speaks non-HTTP, sends UDP, and points names at loopback
through the gateway's DNS. Each test checks the exact outcome: status and reason, which
listener received what (with which credential), and that every trap stayed silent.

Topology: `testbed/transparent.py`. The test process opens the sandbox's sockets
inside the sandbox namespace (`testbed/nsock.py`); the root namespace gets no route.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testbed import nsock, procs
from testbed.expect import assert_refused, header_values
from testbed.h2client import exchange
from testbed.harness import JsonLines
from testbed.netns import netns_available
from testbed.proxyproc import ProxyProcess, start_proxy
from testbed.rawhttp import Conn, Response
from testbed.testca import make_test_pki
from testbed.transparent import (
    DECOY_IP,
    GATEWAY_IP,
    METRICS_PORT,
    OPEN_IP,
    OPEN_NET,
    OPEN_RAW_IP,
    PROXY_PORT,
    REAL_IP,
    RESOLVER,
    TransparentTopology,
)
from tests.e2e.conftest import ECHO_SERVER, EGRESS_PROXY, create_ca

pytestmark = pytest.mark.netns

RAW_SERVER = ["-m", "testbed.raw_server"]
DNS_SERVER = "testbed.dns_server"
REPO = Path(__file__).resolve().parents[2]
SECRET_ENV = "E2E_TP_SECRET"

# Names the gateway resolves from its hosts file. Every name's real home is REAL_IP.
GATEWAY_HOSTS = {
    "api.t.test": [REAL_IP],
    "other.t.test": [REAL_IP],
    "plain.t.test": [REAL_IP],
    "notlisted.t.test": [REAL_IP],
    "gw.t.test": [GATEWAY_IP],
    "pass.t.test": [REAL_IP],
    "rules.t.test": [REAL_IP],
}
# Names the gateway resolves through the tests' DNS server (answer sets in query order).
DNS_ZONE = {
    "rebind.t.test": [[REAL_IP], ["127.0.0.1"]],
    "multi.t.test": [["127.0.0.1", DECOY_IP, REAL_IP]],
    "sandbox-visible.t.test": [[DECOY_IP]],
}
CERT_NAMES = [
    "api.t.test",
    "other.t.test",
    "plain.t.test",
    "rebind.t.test",
    "multi.t.test",
    "pass.t.test",
    "rules.t.test",
]

CONFIG = f"""\
network:
  allowlist:
    - domain: api.t.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: other.t.test
    - domain: plain.t.test
    - domain: rebind.t.test
    - domain: multi.t.test
    - domain: pass.t.test               # relayed, not intercepted
      passthrough: true
    - domain: rules.t.test              # GET only, never below /private/ (docs/configuration.md#rules)
      rules:
        - methods: [GET]
      deny:
        - paths: ["/private/**"]
    - domain: gw.t.test                 # resolves to the gateway: only the self rule refuses
    - domain: {REAL_IP}/32             # the names' home, in a reserved range: opened for 80/443
      ports: [80, 443]
    - domain: {OPEN_NET}               # opened for anything: raw TCP, TLS without SNI
    - domain: {GATEWAY_IP}/32          # the gateway: only the self rule refuses its ports
      ports: [{PROXY_PORT}, {METRICS_PORT}]
"""

SSH_CLIENT_HELLO = b"SSH-2.0-OpenSSH_9.6 sandbox\r\n"
NON_TLS_BYTES = b"\x00\x01\x02\x03 not a TLS record, not HTTP\n"


@dataclass
class Transparent:
    topo: TransparentTopology
    proxy: ProxyProcess
    proxy_ca: Path
    upstream_ca: Path
    secret: str
    upstream_log: JsonLines
    raw_log: JsonLines
    trap_log: JsonLines
    dns_log: JsonLines
    responses: list[Response] = field(default_factory=list)

    # -- the sandbox's side -------------------------------------------------------

    def socket(self, ip: str, port: int, timeout: float = 10.0) -> socket.socket:
        return nsock.connect(self.topo.ns_sandbox, (ip, port), timeout=timeout)

    def tls(self, ip: str, sni: str | None, port: int = 443, alpn: list[str] | None = None) -> Conn:
        ctx = ssl.create_default_context(cafile=str(self.proxy_ca))
        if sni is None:
            ctx.check_hostname = False
        if alpn:
            ctx.set_alpn_protocols(alpn)
        sock = self.socket(ip, port)
        try:
            return Conn.over(ctx.wrap_socket(sock, server_hostname=sni))
        except BaseException:
            sock.close()
            raise

    def plain(self, ip: str, port: int = 80) -> Conn:
        return Conn.over(self.socket(ip, port))

    def request(self, conn: Conn, host: str | None, path: str = "/", **kw: Any) -> Response:
        headers = [("Host", host)] if host is not None else []
        headers += kw.pop("headers", [])
        response = conn.request(kw.pop("method", "GET"), path, headers, **kw)
        self.responses.append(response)
        return response

    # -- the observer's side --------------------------------------------------------

    def scrape_requests_total(self) -> dict[tuple[str, str], float]:
        return {
            (dict(labels)["decision"], dict(labels)["reason"]): value
            for (name, labels), value in self.proxy.scrape().items()
            if name == "egress_requests_total"
        }


@dataclass
class Seen:
    """What reached the upstream namespace, the raw listeners and the traps in one test."""

    tp: Transparent
    marks: tuple[int, int, int]

    def upstream(self) -> list[dict[str, Any]]:
        return self.tp.upstream_log.since(self.marks[0])

    def raw(self) -> list[dict[str, Any]]:
        return self.tp.raw_log.since(self.marks[1])

    def traps(self) -> list[dict[str, Any]]:
        return self.tp.trap_log.since(self.marks[2]) + [
            e for e in self.upstream() if e["event"] == "trap"
        ]

    def requests(self) -> list[dict[str, Any]]:
        return [e for e in self.upstream() if e["event"] == "request"]

    def listeners(self) -> set[str]:
        return {e["listener"] for e in self.upstream() + self.raw()}

    def assert_nothing_reached(self) -> None:
        assert self.upstream() == [], f"reached an upstream: {self.upstream()}"
        assert self.raw() == [], f"reached a raw listener: {self.raw()}"
        assert self.traps() == [], f"reached a trap: {self.traps()}"

    def only_request(self, listener: str) -> dict[str, Any]:
        assert self.traps() == [], f"reached a trap: {self.traps()}"
        assert self.raw() == [], f"reached a raw listener: {self.raw()}"
        assert self.listeners() == {listener}, f"expected only {listener}: {self.upstream()}"
        requests = self.requests()
        assert len(requests) == 1, f"expected one upstream request, got {requests}"
        return requests[0]


# -- set-up ------------------------------------------------------------------------------


def _start(name: str, argv: list[str], log_dir: Path, ready: Any) -> procs.Child:
    child = procs.start(name, argv, log_dir)
    try:
        procs.wait_until(f"{name} ready", ready, timeout=15, child=child)
    except BaseException:
        child.stop()
        raise
    return child


def _probe(topo: TransparentTopology, pki_ca: Path) -> None:
    """From the gateway itself (no redirect there): routes, listeners and certificates work,
    so that a harness fault cannot pass for a proxy refusal."""
    ctx = ssl.create_default_context(cafile=str(pki_ca))
    for ip in (REAL_IP, DECOY_IP, OPEN_IP):
        sock = nsock.connect(topo.ns_gateway, (ip, 443), timeout=5)
        with ctx.wrap_socket(sock, server_hostname="api.t.test") as tls:
            tls.sendall(b"GET /probe HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            assert tls.recv(100).startswith(b"HTTP/1.1 200"), ip
    for ip in (REAL_IP, DECOY_IP, OPEN_IP):
        with nsock.connect(topo.ns_gateway, (ip, 22), timeout=5) as sock:
            assert sock.recv(100).startswith(b"SSH-2.0-upstream"), ip
    with nsock.connect(topo.ns_gateway, (OPEN_RAW_IP, 443), timeout=5) as sock:
        sock.sendall(b"probe")
        assert sock.recv(100) == b"probe"


@pytest.fixture(scope="module")
def tp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Transparent]:
    reason = netns_available()
    if reason is None and shutil.which("iptables") is None:
        reason = "needs iptables (the firewall rules of docs/operations.md; .ci/run installs it)"
    if reason is not None:
        pytest.fail(f"end-to-end tests cannot run: {reason}")
    base = tmp_path_factory.mktemp("transparent")
    pki_dir = base / "pki"
    pki_dir.mkdir()
    pki = make_test_pki(pki_dir, CERT_NAMES, [REAL_IP, DECOY_IP, OPEN_IP])
    logs = {n: base / f"{n}.jsonl" for n in ("upstream", "raw", "trap", "dns")}
    for path in logs.values():
        path.touch()
    zone = base / "zone.json"
    zone.write_text(json.dumps(DNS_ZONE))
    secret = f"s3cr3t-tp-{secrets.token_hex(8)}"
    config = base / "transparent.yaml"
    config.write_text(CONFIG)

    topo = TransparentTopology(tag=f"egx{os.getpid()}")
    children: list[procs.Child] = []
    py = sys.executable
    try:
        topo.build(GATEWAY_HOSTS)
        up, gw = topo.exec_prefix(topo.ns_upstream), topo.exec_prefix(topo.ns_gateway)
        echo_ready, raw_ready, trap_ready = (base / f"{n}.ready" for n in ("echo", "raw", "trap"))
        children.append(
            _start(
                "tp-echo",
                up
                + [py, *ECHO_SERVER, "--log", str(logs["upstream"]), "--ready", str(echo_ready)]
                + ["--cert", str(pki.server_cert), "--key", str(pki.server_key)]
                + [a for ip in (REAL_IP, DECOY_IP, OPEN_IP) for a in ("--echo", f"{ip}:80")]
                + [a for ip in (REAL_IP, DECOY_IP, OPEN_IP) for a in ("--echo-tls", f"{ip}:443")],
                base,
                echo_ready.exists,
            )
        )
        children.append(
            _start(
                "tp-raw",
                up
                + [py, *RAW_SERVER, "--log", str(logs["raw"]), "--ready", str(raw_ready)]
                + [
                    a
                    for ip in (REAL_IP, DECOY_IP, OPEN_IP)
                    for a in ("--banner", f"{ip}:22=SSH-2.0-upstream-{ip}")
                ]
                + ["--tcp", f"{OPEN_RAW_IP}:443"]
                + ["--udp", f"{REAL_IP}:443", "--udp", f"{REAL_IP}:53", "--udp", f"{DECOY_IP}:443"],
                base,
                raw_ready.exists,
            )
        )
        children.append(
            _start(
                "tp-trap",
                gw
                + [py, *ECHO_SERVER, "--log", str(logs["trap"]), "--ready", str(trap_ready)]
                + ["--trap", "[::]:80", "--trap", "[::]:443", "--trap", "[::]:22"],
                base,
                trap_ready.exists,
            )
        )
        dns = procs.start(
            "tp-dns",
            gw
            + [py, "-m", DNS_SERVER, "--listen", "0.0.0.0:53"]
            + ["--zone", str(zone), "--log", str(logs["dns"])],
            base,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        children.append(dns)
        procs.wait_until(
            "tp-dns ready", lambda: "ready" in dns.stdout.read_text(), timeout=15, child=dns
        )
        _probe(topo, pki.ca_cert)

        certs = base / "certs"
        proxy_ca = create_ca(certs)
        env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
        env[SECRET_ENV] = secret
        proxy = start_proxy(
            "tp-proxy",
            gw,
            EGRESS_PROXY,
            config,
            ["--mode", "transparent", "--listen", f"0.0.0.0:{PROXY_PORT}"]
            + ["--metrics", f"0.0.0.0:{METRICS_PORT}", "--certs", str(certs)]
            + ["--upstream-ca", str(pki.ca_cert)]
            # Every request asks the resolver, so that the rebinding answers are really used.
            + ["--dns-cache", "0"],
            base,
            env,
            lambda: nsock.connect(topo.ns_gateway, ("127.0.0.1", METRICS_PORT), timeout=5),
        )
        children.append(proxy.child)
        yield Transparent(
            topo,
            proxy,
            proxy_ca,
            pki.ca_cert,
            secret,
            JsonLines(logs["upstream"]),
            JsonLines(logs["raw"]),
            JsonLines(logs["trap"]),
            JsonLines(logs["dns"]),
        )
    finally:
        for child in reversed(children):
            child.stop()
        failures = topo.close()
        if failures:
            raise RuntimeError("transparent topology cleanup failed:\n" + "\n".join(failures))


@pytest.fixture
def seen(tp: Transparent) -> Seen:
    return Seen(tp, (tp.upstream_log.mark(), tp.raw_log.mark(), tp.trap_log.mark()))


def listener(ip: str, port: int) -> str:
    return f"{ip}:{port}"


# -- HTTPS: the SNI names the destination, never the address the sandbox chose ----------


def test_allowed_https_by_sni_gets_the_transform(tp: Transparent, seen: Seen):
    with tp.tls(REAL_IP, "api.t.test") as conn:
        headers = [("Authorization", "Bearer sandbox"), ("authorization", "Bearer again")]
        response = tp.request(conn, "api.t.test", "/tp-allowed", headers=headers)

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert record["sni"] == "api.t.test"
    assert record["target"] == "/tp-allowed"
    assert header_values(record, "Authorization") == [f"Bearer {tp.secret}"]


@pytest.mark.parametrize("aimed_at", [DECOY_IP, OPEN_IP], ids=["decoy", "cidr-opened"])
def test_sni_of_the_transform_host_aimed_at_another_upstream(
    tp: Transparent, seen: Seen, aimed_at: str
):
    # The sandbox resolved api.t.test to an address of its own choosing. The proxy goes to
    # what api.t.test resolves to; the chosen address sees nothing, not even a connect.
    with tp.tls(aimed_at, "api.t.test") as conn:
        response = tp.request(conn, "api.t.test", "/aimed")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert header_values(record, "Authorization") == [f"Bearer {tp.secret}"]
    assert all(aimed_at not in e["listener"] for e in seen.upstream() + seen.raw())


@pytest.mark.parametrize(
    ("sni", "host"),
    [
        ("other.t.test", "api.t.test"),  # fronting to get the credential
        ("api.t.test", "other.t.test"),  # fronting to move the credential
        ("api.t.test", "notlisted.t.test"),
        ("other.t.test", "other.t.test:8443"),  # same host, another port
    ],
)
def test_host_that_disagrees_with_the_sni_is_host_mismatch(
    tp: Transparent, seen: Seen, sni: str, host: str
):
    with tp.tls(REAL_IP, sni) as conn:
        response = tp.request(conn, host, "/front")

    assert_refused(response, "host_mismatch")
    seen.assert_nothing_reached()


def test_http2_authority_that_disagrees_with_the_sni_is_host_mismatch(tp: Transparent, seen: Seen):
    def h2_request(authority: str, path: str) -> list[tuple[str, str]]:
        return [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", authority),
            (":path", path),
            ("authorization", "Bearer sandbox-h2"),
        ]

    with tp.tls(DECOY_IP, "other.t.test", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [h2_request("other.t.test", "/h2-same"), h2_request("api.t.test", "/h2-front")],
        )

    assert result.ended == {1, 3}, result
    assert result.status(1) == "200", result
    assert result.status(3) == "403", result
    assert result.headers[3].get("x-egress-denied") == "host_mismatch", result
    assert json.loads(result.bodies[3])["reason"] == "host_mismatch"
    record = seen.only_request(listener(REAL_IP, 443))
    assert record["target"] == "/h2-same"
    assert header_values(record, "Authorization") == ["Bearer sandbox-h2"]


def test_passthrough_sni_aimed_at_another_upstream_reaches_the_names_address(
    tp: Transparent, seen: Seen
):
    # Not intercepted: the sandbox sees the upstream's own certificate (the test PKI), and
    # the relay still goes where pass.t.test resolves, not where the sandbox aimed.
    ctx = ssl.create_default_context(cafile=str(tp.upstream_ca))
    with ctx.wrap_socket(tp.socket(DECOY_IP, 443), server_hostname="pass.t.test") as sock:
        conn = Conn.over(sock)
        response = tp.request(conn, "pass.t.test", "/relayed")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert (record["sni"], record["target"]) == ("pass.t.test", "/relayed")


# -- plain HTTP: the Host header names the destination ---------------------------------------


def test_plain_http_is_decided_and_routed_on_the_host_header(tp: Transparent, seen: Seen):
    with tp.plain(DECOY_IP) as conn:
        response = tp.request(conn, "plain.t.test", "/by-host")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 80))
    assert record["target"] == "/by-host"
    assert header_values(record, "Host") == ["plain.t.test"]


def test_plain_http_after_empty_lines_is_read_as_http(tp: Transparent, seen: Seen):
    # mitmproxy took bytes beginning with CRLF for raw TCP (closed here, relayed to an
    # address entry); nginx and Node read a request (RFC 9112 2.2), and so does the proxy
    # now: decided on its Host and routed like any other (D336).
    head = b"\r\n\r\nGET /after-empty-lines HTTP/1.1\r\nHost: plain.t.test\r\n"
    with tp.plain(DECOY_IP) as conn:
        conn.send(head + b"Connection: close\r\n\r\n")
        response = conn.read_response()

    assert response.status == 200, response.describe()
    assert seen.only_request(listener(REAL_IP, 80))["target"] == "/after-empty-lines"


@pytest.mark.parametrize(
    ("aimed_at", "host", "reason"),
    [
        (REAL_IP, "notlisted.t.test", "not_allowlisted"),
        (REAL_IP, "api.t.test", "plaintext_credentials"),
        (DECOY_IP, "api.t.test", "plaintext_credentials"),
        (REAL_IP, "plain.t.test:8080", "host_mismatch"),  # the Host port is not the connection's
        (REAL_IP, "localhost", "loopback"),
        (REAL_IP, "127.0.0.1", "loopback"),
        (REAL_IP, "2130706433", "loopback"),
        (REAL_IP, DECOY_IP, "internal_address"),
        (REAL_IP, "user@plain.t.test", "bad_request"),
    ],
)
def test_plain_http_refusal(tp: Transparent, seen: Seen, aimed_at: str, host: str, reason: str):
    with tp.plain(aimed_at) as conn:
        response = tp.request(conn, host, "/r", headers=[("Authorization", "Bearer sandbox")])

    assert_refused(response, reason)
    seen.assert_nothing_reached()


def test_plain_http_without_a_host_is_decided_on_the_original_destination(
    tp: Transparent, seen: Seen
):
    # No name at all: the only destination is the address the sandbox chose, which is
    # trusted only when an IP/CIDR entry opens it.
    with tp.plain(DECOY_IP) as conn:
        conn.send(b"GET /no-host HTTP/1.0\r\n\r\n")
        refused = conn.read_response()
    assert_refused(refused, "internal_address")
    seen.assert_nothing_reached()

    with tp.plain(OPEN_IP) as conn:
        conn.send(b"GET /no-host HTTP/1.0\r\n\r\n")
        allowed = conn.read_response()
    assert allowed.status == 200, allowed.describe()
    assert seen.only_request(listener(OPEN_IP, 80))["target"] == "/no-host"


def test_keep_alive_connection_decides_each_request_on_its_host(tp: Transparent, seen: Seen):
    with tp.plain(REAL_IP) as conn:
        first = tp.request(conn, "plain.t.test", "/ka-1")
        second = tp.request(conn, "api.t.test", "/ka-2")
        third = tp.request(conn, "other.t.test", "/ka-3")

    assert first.status == 200, first.describe()
    assert_refused(second, "plaintext_credentials")
    assert third.status == 200, third.describe()
    assert [(r["target"], header_values(r, "Host")) for r in seen.requests()] == [
        ("/ka-1", ["plain.t.test"]),
        ("/ka-3", ["other.t.test"]),
    ]
    assert seen.listeners() == {listener(REAL_IP, 80)}


# -- TLS without SNI -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("aimed_at", "host", "reason"),
    [
        (DECOY_IP, "api.t.test", "no_sni"),  # no name: the Host header cannot stand in for one
        (DECOY_IP, DECOY_IP, "no_sni"),
        (REAL_IP, "api.t.test", "host_mismatch"),  # opened by address, so Host must name it
        (OPEN_IP, "api.t.test", "host_mismatch"),
    ],
)
def test_tls_without_sni_is_refused_unless_an_address_entry_opens_it(
    tp: Transparent, seen: Seen, aimed_at: str, host: str, reason: str
):
    with tp.tls(aimed_at, None) as conn:
        response = tp.request(conn, host, "/no-sni", headers=[("Authorization", "Bearer x")])

    assert_refused(response, reason)
    seen.assert_nothing_reached()


def test_tls_without_sni_passes_to_an_address_a_cidr_entry_opens(tp: Transparent, seen: Seen):
    with tp.tls(OPEN_IP, None) as conn:
        response = tp.request(conn, OPEN_IP, "/no-sni-open")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(OPEN_IP, 443))
    assert record["target"] == "/no-sni-open"
    assert header_values(record, "Authorization") == []


# -- non-HTTP TCP ----------------------------------------------------------------------------------


def _raw_exchange(tp: Transparent, ip: str, port: int, send: bytes) -> bytes:
    """Send `send`, then read until the peer closes or 3 s pass without news."""
    received = b""
    with tp.socket(ip, port, timeout=3.0) as sock:
        sock.sendall(send)
        try:
            while len(received) < 4096:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
                if send in received:
                    break  # the echo came back: the pipe is open
        except ConnectionResetError:
            pass
    return received


@pytest.mark.parametrize(
    ("ip", "port", "send"),
    [
        (REAL_IP, 22, SSH_CLIENT_HELLO),  # the names' home, opened by address only for 80/443
        (DECOY_IP, 22, SSH_CLIENT_HELLO),
        (DECOY_IP, 443, NON_TLS_BYTES),
    ],
)
def test_raw_tcp_is_closed_unless_an_address_entry_opens_it(
    tp: Transparent, seen: Seen, ip: str, port: int, send: bytes
):
    before = tp.scrape_requests_total()
    received = _raw_exchange(tp, ip, port, send)

    assert received == b"", f"the sandbox got {received!r}"
    seen.assert_nothing_reached()
    after = tp.scrape_requests_total()
    assert after[("deny", "not_allowlisted")] == before[("deny", "not_allowlisted")] + 1


@pytest.mark.parametrize(
    ("ip", "port", "send", "banner"),
    [
        (OPEN_IP, 22, SSH_CLIENT_HELLO, f"SSH-2.0-upstream-{OPEN_IP}\r\n".encode()),
        (OPEN_RAW_IP, 443, NON_TLS_BYTES, b""),
    ],
)
def test_raw_tcp_passes_to_an_address_a_cidr_entry_opens(
    tp: Transparent, seen: Seen, ip: str, port: int, send: bytes, banner: bytes
):
    received = _raw_exchange(tp, ip, port, send)

    assert received == banner + send, received
    events = [(e["event"], e["listener"]) for e in seen.raw()]
    assert events == [("connect", f"{ip}:{port}"), ("data", f"{ip}:{port}")], seen.raw()
    assert bytes.fromhex(seen.raw()[1]["hex"]) == send
    assert seen.upstream() == []
    assert seen.traps() == []


# -- the proxy's own addresses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("aimed_at", "port", "host"),
    [
        (GATEWAY_IP, METRICS_PORT, f"{GATEWAY_IP}:{METRICS_PORT}"),
        (GATEWAY_IP, PROXY_PORT, f"{GATEWAY_IP}:{PROXY_PORT}"),
        (GATEWAY_IP, METRICS_PORT, f"gw.t.test:{METRICS_PORT}"),
    ],
)
def test_the_proxys_own_ports_are_refused(
    tp: Transparent, seen: Seen, aimed_at: str, port: int, host: str
):
    # An entry opens the gateway's address on exactly these ports: only the self rule is left.
    with tp.plain(aimed_at, port) as conn:
        response = tp.request(conn, host, "/metrics")

    assert_refused(response, "proxy_host")  # issue 48: not loopback
    assert b"egress_requests_total" not in response.body
    seen.assert_nothing_reached()


def test_the_metrics_port_answers_inside_the_gateway(tp: Transparent):
    # The control for the test above: something does answer there.
    with Conn.over(nsock.connect(tp.topo.ns_gateway, (GATEWAY_IP, METRICS_PORT))) as conn:
        response = conn.request("GET", "/metrics", [("Host", "x"), ("Connection", "close")])
    assert response.status == 200
    assert b"egress_requests_total" in response.body


# -- UDP and DNS ----------------------------------------------------------------------------------------


def _udp_send(namespace: str, address: tuple[str, int], payload: bytes) -> None:
    with nsock.in_namespace(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.sendto(payload, address)


def _dns_query(name: str, ident: int) -> bytes:
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 1, 1)


def test_udp_and_quic_from_the_sandbox_are_not_forwarded(tp: Transparent, seen: Seen):
    marker = secrets.token_hex(4).encode()
    quic_initial = b"\xc0\x00\x00\x00\x01" + marker  # long header, QUIC version 1
    for address, payload in [
        ((REAL_IP, 443), quic_initial),
        ((DECOY_IP, 443), quic_initial),
        ((REAL_IP, 53), _dns_query("api.t.test", 7) + marker),
    ]:
        _udp_send(tp.topo.ns_sandbox, address, payload)
    # The control, sent after: the same datagram from the gateway itself does arrive. Once
    # it has, a forwarded datagram from the sandbox would have arrived too.
    control = b"control-" + marker
    _udp_send(tp.topo.ns_gateway, (REAL_IP, 443), control)
    tp.raw_log.wait_for(seen.marks[1], lambda e: e.get("hex") == control.hex())

    datagrams = [e for e in seen.raw() if e["event"] == "datagram"]
    assert [bytes.fromhex(e["hex"]) for e in datagrams] == [control], datagrams


def test_the_sandbox_reaches_only_the_resolver_it_was_given(tp: Transparent, seen: Seen):
    with nsock.in_namespace(tp.topo.ns_sandbox):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        sock.settimeout(5)
        sock.sendto(_dns_query("sandbox-visible.t.test", 4242), (RESOLVER, 53))
        answer, _peer = sock.recvfrom(2048)
    ident, flags, _qd, ancount = struct.unpack("!HHHH", answer[:8])
    assert (ident, flags & 0x000F, ancount) == (4242, 0, 1)
    assert answer[-4:] == socket.inet_aton(DECOY_IP)
    assert [e for e in seen.raw() if e["event"] == "datagram"] == []


# -- names that move: rebinding and several answers ----------------------------------------------------


def test_rebinding_name_never_reaches_loopback(tp: Transparent, seen: Seen):
    dns_mark = tp.dns_log.mark()
    with tp.plain(REAL_IP) as conn:
        first = tp.request(conn, "rebind.t.test", "/rebind-1")
        second = tp.request(conn, "rebind.t.test", "/rebind-2")

    assert first.status == 200, first.describe()
    assert_refused(second, "loopback")
    assert [r["target"] for r in seen.requests()] == ["/rebind-1"]
    assert seen.listeners() == {listener(REAL_IP, 80)}
    assert seen.traps() == []
    answers = [
        e["answer"]
        for e in tp.dns_log.since(dns_mark)
        if e["type"] == 1 and e["name"] == "rebind.t.test"
    ]
    assert answers == [[REAL_IP], ["127.0.0.1"]], answers  # the rebinding really happened


def test_name_with_several_answers_uses_only_a_permitted_one(tp: Transparent, seen: Seen):
    with tp.tls(DECOY_IP, "multi.t.test") as conn:
        response = tp.request(conn, "multi.t.test", "/multi")

    assert response.status == 200, response.describe()
    record = seen.only_request(listener(REAL_IP, 443))
    assert record["sni"] == "multi.t.test"


# -- nothing leaked, nothing broke ------------------------------------------------------------------------


def test_secret_reaches_no_log_metric_or_response(tp: Transparent):
    places = {
        "proxy stdout": tp.proxy.child.stdout.read_text(errors="replace"),
        "proxy stderr": tp.proxy.child.stderr.read_text(errors="replace"),
        "audit log": tp.proxy.audit.read_text(errors="replace"),
        "/metrics": tp.proxy.metrics_text(),
    }
    for i, response in enumerate(tp.responses):
        places[f"response {i} headers"] = repr(response.headers)
        if response.header_all("X-Egress-Denied") or response.status >= 400:
            # An upstream may echo what it received in its body (the echo server does);
            # the proxy's own refusals must never carry it.
            places[f"response {i} refusal body"] = response.body.decode(errors="replace")
    assert len(tp.responses) > 10  # the scan is not vacuous
    assert [where for where, text in places.items() if tp.secret in text] == []


def test_rules_decide_each_request_in_transparent_mode(tp: Transparent, seen: Seen):
    with tp.tls(REAL_IP, "rules.t.test") as conn:
        allowed = tp.request(conn, "rules.t.test", "/public")
        posted = tp.request(conn, "rules.t.test", "/public", method="POST", body=b"x")
    assert allowed.status == 200, allowed.describe()
    assert_refused(posted, "rule_mismatch")
    with tp.plain(REAL_IP) as conn:
        assert_refused(tp.request(conn, "rules.t.test", "/private/a"), "rule_denied")
    assert [r["target"] for r in seen.requests()] == ["/public"]


def test_transparent_proxy_is_alive_and_logged_no_exception(tp: Transparent):
    assert tp.proxy.child.alive()
    assert tp.proxy.healthz() == 200
    for path in (tp.proxy.child.stdout, tp.proxy.child.stderr):
        text = path.read_text(errors="replace")
        bad = [line for line in text.splitlines() if "Traceback" in line or "Addon error" in line]
        assert bad == [], f"{path.name}: {text[:2000]}"
