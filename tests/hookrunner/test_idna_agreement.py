"""An http hook's host is spelled on the wire exactly as the egress proxy canonicalises it.

The proxy matches allowlist entries on UTS 46 (non-transitional) A-labels
(`proxy.hosts`); a runner that encoded with Python's IDNA 2003 codec would
CONNECT to ``strasse.example`` for a hook written as ``straße.example``: another
domain than the one the allowlist entry names. Each case here is a name on which
the two dialects disagree (deviation characters ß, ς, ZWJ, ZWNJ), sent through a
real local CONNECT proxy to a real HTTPS server whose certificate carries the
A-label: the test asserts the CONNECT authority, the TLS SNI and the Host header.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sandbox_egress.hookrunner.httpclient import HttpClient, HttpFailure
from sandbox_egress.hookrunner.proxyroute import bypasses
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import canonical_host, canonical_name, parse_authority
from sandbox_egress.proxy.policy import Policy
from testbed.testca import write_pki
from tests.hookrunner.helpers import Env, base_environ, pre_group, rule
from tests.hookrunner.net_support import Reply, _relay, https_server
from tests.hookrunner.tls_support import Pki

DENY_BODY = json.dumps({"decision": "deny", "reason": "idna gate"}).encode()

# (hook URL host, the A-label both halves must use, what IDNA 2003 made of it)
DISAGREEING = [
    ("straße.example", "xn--strae-oqa.example", "strasse.example"),
    ("Straße.Example", "xn--strae-oqa.example", "strasse.example"),
    ("faß.de", "xn--fa-hia.de", "fass.de"),
    ("ẞ.example", "xn--zca.example", "ss.example"),
    ("βόλος.example", "xn--nxasmm1c.example", "xn--nxasmq6b.example"),
    ("ς.example", "xn--3xa.example", "xn--4xa.example"),
    ("ශ්\u200dරී.example", "xn--10cl1a0b660p.example", "xn--10cl1a0b.example"),  # ZWJ
    ("نامه\u200cای.example", "xn--mgba3gch31f060k.example", "xn--mgba3gch31f.example"),  # ZWNJ
]


@dataclass
class TunnelAll:
    """A CONNECT proxy that tunnels every target to one local port and records the targets."""

    upstream: int
    connects: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def tunnel_all(upstream: int) -> Iterator[TunnelAll]:
    state = TunnelAll(upstream)
    stop = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            client: socket.socket = self.request
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target, _ = request_line.split(" ", 2)
            state.connects.append(target)
            if method != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            with socket.create_connection(("127.0.0.1", state.upstream), timeout=5) as upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                _relay(client, upstream, stop)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def idna_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory: Path = tmp_path_factory.mktemp("idna-pki")
    written = write_pki(
        directory,
        ca_common_name="hookrunner IDNA test CA",
        dns_names=sorted({alabel for _, alabel, _ in DISAGREEING}),
        files=("ca.pem", "server.pem", "server.key"),
    )
    return Pki(written.ca_cert, written.server_cert, written.server_key)


@pytest.mark.parametrize(("name", "alabel", "idna2003"), DISAGREEING)
def test_connect_sni_and_host_use_the_proxys_a_label(
    env: Env, idna_pki: Pki, name: str, alabel: str, idna2003: str
) -> None:
    assert str(canonical_host(name)) == canonical_name(name) == alabel != idna2003
    seen_sni: list[str | None] = []
    context = idna_pki.server_context()
    context.sni_callback = lambda sock, sni, ctx: seen_sni.append(sni)  # type: ignore[assignment,misc,return-value]
    with https_server(context, Reply(200, DENY_BODY)) as server, tunnel_all(server.port) as proxy:
        env.hooks({"web": pre_group(rule("*", {"type": "http", "url": f"https://{name}/gate"}))})
        environ = base_environ(SSL_CERT_FILE=str(idna_pki.ca_file), HTTPS_PROXY=proxy.url)
        decision = env.session(environ=environ).pre("read_file", {"path": "x"})
    assert (decision.allowed, decision.reason) == (False, "idna gate")
    assert proxy.connects == [f"{alabel}:443"]
    assert seen_sni == [alabel]
    [request] = server.received
    assert request.headers["host"] == alabel


@pytest.mark.parametrize(
    ("host", "authority"),
    [
        ("0x7f000001", "127.0.0.1:443"),  # the proxy's WHATWG IPv4 reading
        ("[::ffff:7f00:1]", "[::ffff:7f00:1]:443"),
        ("EXAMPLE.com.", "example.com:443"),
    ],
)
def test_other_spellings_follow_the_proxy(env: Env, host: str, authority: str) -> None:
    with tunnel_all(1) as proxy:
        env.hooks({"web": pre_group(rule("*", {"type": "http", "url": f"https://{host}/"}))})
        env.session(environ=base_environ(HTTPS_PROXY=proxy.url)).pre("read_file", {"path": "x"})
    assert proxy.connects == [authority]


@pytest.mark.parametrize("name", ["a\u200db.example", "a\u200cb.example"])
def test_a_name_the_proxy_refuses_is_a_skipped_handler_never_contacted(env: Env, name: str) -> None:
    """IDNA 2003 deletes a stray ZWJ/ZWNJ (``ab.example``); UTS 46 refuses the label."""
    with tunnel_all(1) as proxy:
        env.hooks({"web": pre_group(rule("*", {"type": "http", "url": f"https://{name}/"}))})
        decision = env.session(environ=base_environ(HTTPS_PROXY=proxy.url)).pre(
            "read_file", {"path": "x"}
        )
    assert (decision.allowed, decision.runs, proxy.connects) == (True, (), [])
    [problem] = [w for w in env.warnings() if w["kind"] == "config"]
    assert problem["path"] == "$.web.pre_tool_execution[0].hooks[0].url"
    assert problem["cause"] == "has an invalid host name; handler skipped"


def test_an_unencodable_host_is_refused_before_any_connection() -> None:
    """Called without the schema check: the client itself refuses what the proxy would."""
    with tunnel_all(1) as proxy:
        client = HttpClient({"HTTPS_PROXY": proxy.url})
        result = client.post("https://a\u200db.example/", b"{}", (), 5.0)
    assert (result.failure, result.detail, proxy.connects) == (
        HttpFailure.NETWORK,
        "invalid host name",
        [],
    )


def test_a_unicode_no_proxy_entry_matches_the_a_label_host() -> None:
    assert bypasses("xn--strae-oqa.example", 443, "127.0.0.1,.straße.example")
    assert bypasses("a.xn--strae-oqa.example", 443, "*.STRASSE.example,straße.example")
    assert not bypasses("strasse.example", 443, "straße.example")


@pytest.mark.parametrize(("name", "alabel", "idna2003"), DISAGREEING)
def test_the_proxys_policy_allows_what_the_runner_sends_and_nothing_else(
    env: Env, name: str, alabel: str, idna2003: str
) -> None:
    """Allowlist entry = the hook URL's host as written; the CONNECT the runner sends is
    allowed by the proxy's own policy, the IDNA 2003 spelling is not."""
    policy = Policy(parse({"network": {"allowlist": [{"domain": name}]}}, "env.yaml", {}))
    with tunnel_all(1) as proxy:
        env.hooks({"web": pre_group(rule("*", {"type": "http", "url": f"https://{name}/"}))})
        env.session(environ=base_environ(HTTPS_PROXY=proxy.url)).pre("read_file", {"path": "x"})
    [authority] = proxy.connects
    host, port = parse_authority(authority)
    sent = policy.decide(host, port, tls=None)
    other = policy.decide(canonical_host(idna2003), 443, tls=None)
    assert (sent.allowed, sent.reason) == (True, Reason.ALLOWLISTED)
    assert (other.allowed, other.reason) == (False, Reason.NOT_ALLOWLISTED)
