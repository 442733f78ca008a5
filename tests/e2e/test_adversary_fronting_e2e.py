"""End to end, regular mode, against a sandbox that forges request-targets and header bytes
(issue 10, items 1, 4 and 7; SPEC 1.3, 1.6).

* Fronting through the request-target: inside a tunnel to a transform host, an
  absolute-form target (HTTP/1) or a non-origin `:path` (HTTP/2) that names another host
  is `host_mismatch`; one that is neither origin-form, nor absolute-form, nor `*` for
  OPTIONS is `bad_request`; an absolute-form target naming the decided host reaches the
  upstream in origin-form (docs/decisions.md D20).
* Header bytes RFC 9112 forbids a proxy to forward (bare CR, obs-fold, NUL, controls,
  a method that is not a token) are `bad_request` and nothing reaches an upstream (D21).
* A ClientHello whose SNI does not parse is `bad_request`, not a tunnel without the
  SNI/CONNECT agreement check (D23).
* The proxy never reaches itself: not through the IPv4-mapped spelling of its listen or
  metrics address, not when `--listen`/`--metrics` are names, and not through any other
  port of its own host that only a CIDR entry (the session config opens the proxy's /30)
  would open (item 5, D22).
* A reload that lands while a request's name is being resolved does not decide that
  request: it is decided and pinned by the configuration it arrived under (item 7, D24).

Transparent mode: tests/e2e/test_adversary_transparent_e2e.py.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import EGRESS_PROXY, REPO, PrivateProxy, proxy_env
from tests.support import procs
from tests.support.expect import Observed, assert_refused, header_values
from tests.support.h2client import exchange
from tests.support.harness import Harness, JsonLines
from tests.support.netns import UPSTREAM_IP, Topology
from tests.support.proxyproc import ProxyProcess, start_proxy
from tests.support.rawhttp import Conn, Response

pytestmark = pytest.mark.netns

API = "api.allowed.test"  # transform entry: Authorization and X-Api-Key are injected


def _secret_headers(record: dict[str, object]) -> list[str]:
    return header_values(record, "Authorization") + header_values(record, "X-Api-Key")


# -- HTTP/1 request-targets inside an intercepted tunnel ------------------------------------


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("https://evil.test/x", "host_mismatch"),  # the reproduction
        ("https://notlisted.test/x", "host_mismatch"),
        ("http://evil.test/x", "host_mismatch"),
        ("https://api.allowed.test:8443/x", "host_mismatch"),  # the tunnel's host, another port
        ("https://API.ALLOWED.TEST.evil.test/x", "host_mismatch"),
        ("*", "bad_request"),  # asterisk-form is for OPTIONS only
        ("/x\x7f", "bad_request"),  # DEL in the target
        ("/x\x01y", "bad_request"),  # a control byte in the target
        ("/caf\xe9", "bad_request"),  # a byte outside US-ASCII
        ("/x#frag", "bad_request"),  # a fragment is never part of a request-target
        ("https://api.allowed.test@evil.test/x", None),  # mitmproxy's reader: 400
        ("https://evil.test#@api.allowed.test/x", None),
        ("evil.test/x", None),
    ],
)
def test_http1_target_that_names_another_host_or_is_malformed_is_refused(
    harness: Harness, obs: Observed, target: str, reason: str | None
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", target, [("Host", API)]))

    if reason is None:  # mitmproxy refuses the request line before any hook runs
        assert response.status == 400, response.describe()
    else:
        assert_refused(response, reason)
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("target", "upstream_target"),
    [
        ("https://api.allowed.test/x?q=1", "/x?q=1"),
        ("https://API.allowed.test:443/y", "/y"),
        ("https://api.allowed.test", "/"),
        ("/plain/origin?form", "/plain/origin?form"),
    ],
)
def test_http1_target_naming_the_tunnel_host_reaches_the_upstream_in_origin_form(
    harness: Harness, obs: Observed, target: str, upstream_target: str
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", target, [("Host", API)]))

    assert response.status == 200, response.describe()
    record = obs.only_request()
    assert record["target"] == upstream_target
    assert header_values(record, "Host") == [API]
    assert _secret_headers(record) == [
        f"Bearer {harness.secrets[0]}",
        harness.secrets[0],
    ]


def test_options_asterisk_reaches_the_upstream_as_asterisk(harness: Harness, obs: Observed):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("OPTIONS", "*", [("Host", API)]))

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "*"


def test_plain_tunnel_absolute_target_naming_another_host_is_host_mismatch(
    harness: Harness, obs: Observed
):
    # A CONNECT tunnel that carries plain HTTP (no TLS inside): the same rule.
    with harness.conn() as conn:
        assert conn.connect("plain.allowed.test:80").status == 200
        response = harness.remember(
            conn.request("GET", "http://evil.test/x", [("Host", "plain.allowed.test")])
        )

    assert_refused(response, "host_mismatch")
    obs.assert_nothing_reached()


def test_plain_tunnel_absolute_target_naming_the_host_is_sent_in_origin_form(
    harness: Harness, obs: Observed
):
    with harness.conn() as conn:
        assert conn.connect("other.allowed.test:80").status == 200
        response = harness.remember(
            conn.request("GET", "http://other.allowed.test/z?k=v", [("Host", "other.allowed.test")])
        )

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "/z?k=v"


def test_regular_plain_http_absolute_form_reaches_the_upstream_in_origin_form(
    harness: Harness, obs: Observed
):
    response = harness.plain("http://other.allowed.test/p/q?r=s")

    assert response.status == 200, response.describe()
    assert obs.only_request()["target"] == "/p/q?r=s"


# -- HTTP/2 :path ---------------------------------------------------------------------------


def _h2(path: str, method: str = "GET", authority: str = API) -> list[tuple[str, str]]:
    return [
        (":method", method),
        (":scheme", "https"),
        (":authority", authority),
        (":path", path),
    ]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("http://evil.test/x", "host_mismatch"),  # the reproduction
        ("https://evil.test/x", "host_mismatch"),
        ("https://api.allowed.test:8443/x", "host_mismatch"),
        ("evil.test/x", "bad_request"),  # neither origin- nor absolute-form
        ("*", "bad_request"),  # asterisk-form for GET
        ("https://user@api.allowed.test/x", "bad_request"),  # userinfo
        ("ftp://api.allowed.test/x", "bad_request"),  # not an http(s) URI
        ("https:///x", "bad_request"),  # empty authority
        ("/x y", "bad_request"),  # a space inside :path
        # parser-differential spellings: whoever reads the authority, it is not the host's
        ("https://api.allowed.test@evil.test/x", "bad_request"),
        ("https://api.allowed.test:443@evil.test/x", "bad_request"),
        ("https://evil.test\\@api.allowed.test/x", "bad_request"),
        ("https://evil.test%2f@api.allowed.test/x", "bad_request"),
        ("https://evil.test#@api.allowed.test/x", "bad_request"),
        ("https://evil.test?@api.allowed.test/x", "host_mismatch"),  # evil.test, query "@..."
        ("https://[::1]/x", "host_mismatch"),
        ("HTTPS://EVIL.TEST/x", "host_mismatch"),
    ],
)
def test_http2_path_that_is_not_origin_form_for_the_tunnel_host_is_refused(
    harness: Harness, obs: Observed, path: str, reason: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(conn.sock, [_h2(path)])

    assert result.ended == {1}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", reason)
    assert json.loads(result.bodies[1])["reason"] == reason
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("path", "method", "upstream_target"),
    [
        ("https://api.allowed.test/h2?abs=1", "GET", "/h2?abs=1"),
        ("https://api.allowed.test:443", "GET", "/"),
        ("https://api.allowed.test?q", "GET", "/?q"),
        ("*", "OPTIONS", "*"),
    ],
)
def test_http2_absolute_path_naming_the_tunnel_host_is_sent_in_origin_form(
    harness: Harness, obs: Observed, path: str, method: str, upstream_target: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [_h2(path, method)])

    assert result.ended == {1}, result
    assert result.status(1) == "200", result
    record = obs.only_request()
    assert record["target"] == upstream_target
    assert header_values(record, "Host") == [API]
    assert _secret_headers(record) == [
        f"Bearer {harness.secrets[0]}",
        harness.secrets[0],
    ]


# -- an SNI that does not parse (D23) -------------------------------------------------------


@pytest.mark.parametrize("sni", ["999.1.2.3", "api..allowed.test"])
def test_sni_that_does_not_parse_is_bad_request_inside_the_tunnel(
    harness: Harness, obs: Observed, sni: str
):
    # Python's ssl refuses to IDNA-encode an empty label, but sends ASCII bytes as they are.
    with harness.tunnel(f"{API}:443", sni=sni.encode(), check_hostname=False) as conn:  # type: ignore[arg-type]
        response = harness.remember(conn.request("GET", "/bad-sni", [("Host", API)]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


# -- header bytes a proxy must not forward (D21) --------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        ("X-A", "b\rHost: evil.test"),  # bare CR: a lenient upstream sees a second Host
        ("X-Fold", "one\r\n Transfer-Encoding: chunked"),  # obs-fold (SP)
        ("X-Fold", "one\r\n\ttwo"),  # obs-fold (HTAB)
        ("X-Nul", "a\x00b"),
        ("X-Ctl", "a\x01b"),
        ("X-Del", "a\x7fb"),
        ("X-Vt", "a\x0bb"),
    ],
    ids=["bare-cr", "obs-fold-sp", "obs-fold-tab", "nul", "ctl", "del", "vt"],
)
def test_http1_header_value_with_forbidden_bytes_is_bad_request(
    harness: Harness, obs: Observed, field: tuple[str, str]
):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", "/hdr", [("Host", API), field]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


def test_plain_proxy_request_with_a_bare_cr_is_bad_request(harness: Harness, obs: Observed):
    response = harness.plain(
        "http://other.allowed.test/hdr", [("X-A", "b\rHost: api.allowed.test")]
    )

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("method", ["GET(", "GET\x00", "GET\x7f", "GET\xc9", "GET@X"])
def test_method_that_is_not_a_token_is_bad_request(harness: Harness, obs: Observed, method: str):
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request(method, "/m", [("Host", API)]))

    assert_refused(response, "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("name", ["X\x00Y", "Host ", "X(Y", "X\x01"])
def test_http1_header_name_that_is_not_a_token_never_reaches_the_policy(
    harness: Harness, obs: Observed, name: str
):
    # mitmproxy's own check (validate_inbound_headers, kept on) answers 400 before any
    # hook runs, so there is no reason code; the policy's check would refuse it too.
    with harness.tunnel(f"{API}:443") as conn:
        response = harness.remember(conn.request("GET", "/n", [("Host", API), (name, "v")]))

    assert response.status == 400, response.describe()
    assert response.header("X-Egress-Denied") is None
    obs.assert_nothing_reached()


@pytest.mark.parametrize("value", ["a\x01b", "a\x7fb", "a\x1bb"], ids=["ctl", "del", "esc"])
def test_http2_header_value_with_a_control_byte_is_bad_request(
    harness: Harness, obs: Observed, value: str
):
    # h2 itself rejects NUL, CR and LF; the other control bytes reach the policy.
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [[*_h2("/h2-ctl"), ("x-ctl", value)]])

    assert result.ended == {1}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", "bad_request")
    obs.assert_nothing_reached()


@pytest.mark.parametrize("value", ["a\x00b", "a\rb", "a\nhost: evil.test"], ids=["nul", "cr", "lf"])
def test_http2_header_value_with_nul_cr_or_lf_never_reaches_an_upstream(
    harness: Harness, obs: Observed, value: str
):
    with harness.tunnel(f"{API}:443", alpn=["h2"]) as conn:
        result = exchange(conn.sock, [[*_h2("/h2-nul"), ("x-bad", value)]], timeout=5.0)

    assert result.status(1) is None, result  # h2 refuses the header block: no response
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    ("authority", "data"),
    [
        (f"{API}:443", b"G(T /m HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"),
        (f"{API}:443", b"\x00GET /m HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n"),
        ("other.allowed.test:80", b"SSH-2.0-OpenSSH_9.6 sandbox\r\n"),
        ("other.allowed.test:80", b"G(T /m HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"),
    ],
    ids=["tls-not-a-method", "tls-leading-nul", "plain-ssh", "plain-not-a-method"],
)
def test_bytes_that_are_not_http_inside_a_tunnel_to_a_name_are_closed(
    harness: Harness, obs: Observed, authority: str, data: bytes
):
    # mitmproxy relays what does not start like an HTTP method as raw TCP; raw TCP inside
    # a CONNECT to a name is refused (D9), so the connection closes and nothing is relayed.
    with harness.conn() as conn:
        assert conn.connect(authority).status == 200
        if authority.endswith(":443"):
            ctx = harness.client_tls()
            conn.start_tls(ctx, API)
        conn.send(data)
        received = b""
        try:
            while chunk := conn.sock.recv(4096):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass

    assert received == b"", received
    obs.assert_nothing_reached()


# -- the proxy's own addresses (D22) --------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:{proxy}]:9464/metrics",  # main served its metrics to the sandbox
        "http://[::ffff:{proxy}]:9464/healthz",
        "http://{proxy}:80/",  # another port of the proxy's host (a trap listens there)
        "http://[::ffff:{proxy}]:443/",
    ],
)
def test_plain_request_to_the_proxys_own_host_is_loopback(
    harness: Harness, obs: Observed, url: str
):
    response = harness.plain(url.format(proxy=harness.proxy_host))

    assert_refused(response, "loopback")
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    "authority",
    [
        "[::ffff:{proxy}]:8080",  # no data is sent: on main the tunnel opened (and would loop)
        "[::ffff:{proxy}]:9464",
        "{proxy}:8443",
    ],
)
def test_connect_to_the_proxys_own_host_is_loopback(
    harness: Harness, obs: Observed, authority: str
):
    response = harness.connect(authority.format(proxy=harness.proxy_host))

    assert_refused(response, "loopback")
    obs.assert_nothing_reached()


NAMED_PORT, NAMED_METRICS = 8180, 9580  # apart from private_proxy's 8100+n and 9500+n


@pytest.fixture
def named_proxy(harness: Harness, topology: Topology, e2e_dir: Path) -> Iterator[ProxyProcess]:
    """A proxy whose --listen and --metrics are names (self.allowed.test is its address)
    and whose allowlist opens its own /30: only the self rule can refuse its endpoints."""
    config = e2e_dir / "named-self.yaml"
    config.write_text(f"network:\n  allowlist:\n    - domain: {topology.client_net}\n")
    process = start_proxy(
        "named-self",
        topology.exec_prefix(topology.ns_proxy),
        EGRESS_PROXY,
        config,
        ["--listen", f"self.allowed.test:{NAMED_PORT}"]
        + ["--metrics", f"self.allowed.test:{NAMED_METRICS}"]
        + ["--certs", str(e2e_dir / "certs")],
        e2e_dir,
        proxy_env(harness.secrets[0]),
        lambda: socket.create_connection((topology.proxy_ip, NAMED_METRICS), timeout=5),
    )
    try:
        yield process
    finally:
        process.child.stop()


def test_named_listen_and_metrics_addresses_are_refused(
    harness: Harness, named_proxy: ProxyProcess
):
    proxy = harness.proxy_host
    with Conn(proxy, NAMED_PORT) as conn:
        metrics = harness.remember(
            conn.request(
                "GET",
                f"http://{proxy}:{NAMED_METRICS}/metrics",
                [("Host", f"{proxy}:{NAMED_METRICS}"), ("Connection", "close")],
            )
        )
    with Conn(proxy, NAMED_PORT) as conn:
        listen = harness.remember(conn.connect(f"[::ffff:{proxy}]:{NAMED_PORT}"))

    assert_refused(metrics, "loopback")
    assert_refused(listen, "loopback")


# -- a reload during a request's DNS lookup (D24) -------------------------------------------

SLOW = "slow.allowed.test"  # answered only by the held DNS server below
MAPPED = "mapped-self.allowed.test"  # answered with the proxy's address, IPv4-mapped
RACE_V1 = 'network:\n  allowlist:\n    - domain: "*.allowed.test"\n'
RACE_V2 = RACE_V1 + "    - domain: 198.18.1.0/24\n"  # opens the upstream's reserved range


@pytest.fixture
def held_dns(topology: Topology, e2e_dir: Path) -> Iterator[tuple[JsonLines, Path]]:
    """The tests' DNS server in the proxy namespace, holding answers for SLOW until the
    release file exists (tests/support/dns_server.py --hold)."""
    zone, log, release = (e2e_dir / f"race-{n}" for n in ("zone.json", "dns.jsonl", "release"))
    zone.write_text(json.dumps({SLOW: [[UPSTREAM_IP]], MAPPED: [[f"::ffff:{topology.proxy_ip}"]]}))
    log.touch()
    release.unlink(missing_ok=True)
    argv = topology.exec_prefix(topology.ns_proxy) + [
        sys.executable, "-m", "tests.support.dns_server", "--listen", "127.0.0.1:53",
        "--zone", str(zone), "--log", str(log), "--hold", f"{SLOW}={release}",
    ]  # fmt: skip
    child = procs.start("race-dns", argv, e2e_dir, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        procs.wait_until(
            "DNS server", lambda: "ready" in child.stdout.read_text(), timeout=15, child=child
        )
        yield JsonLines(log), release
    finally:
        release.touch()
        child.stop()


def test_a_reload_during_the_lookup_does_not_decide_the_request(
    private_proxy: Callable[..., PrivateProxy],
    held_dns: tuple[JsonLines, Path],
    obs: Observed,
):
    dns_log, release = held_dns
    p = private_proxy("race", RACE_V1, "--dns-cache", "0")
    mark = dns_log.mark()
    responses: list[Response] = []
    request = threading.Thread(target=lambda: responses.append(p.view.plain(f"http://{SLOW}/race")))
    request.start()
    try:
        dns_log.wait_for(mark, lambda e: e["name"] == SLOW)  # the lookup is in flight
        p.process.config.write_text(RACE_V2)
        assert p.process.reload() == {"ok": 1.0, "failed": 0.0}
    finally:
        release.touch()
        request.join(timeout=30)

    # Decided by RACE_V1 (whose address stage refuses the reserved range), not pinned by V2.
    assert len(responses) == 1, "the request did not finish"
    assert_refused(responses[0], "internal_address", host=SLOW)
    obs.assert_nothing_reached()
    # The next request is decided by the new configuration, wholly.
    after = p.view.plain(f"http://{SLOW}/after")
    assert after.status == 200, after.describe()
    assert obs.only_request()["target"] == "/after"


def test_a_name_answering_the_mapped_spelling_of_the_proxy_is_loopback(
    private_proxy: Callable[..., PrivateProxy],
    held_dns: tuple[JsonLines, Path],
    topology: Topology,
    obs: Observed,
):
    # The sandbox owns a name and answers AAAA ::ffff:<proxy address>; the proxy's own /30
    # is opened by an entry, so only the self rule stands between it and its metrics (D22).
    config = f'network:\n  allowlist:\n    - domain: "*.allowed.test"\n    - domain: {topology.client_net}\n'
    p = private_proxy("mapped", config, "--dns-cache", "0")
    response = p.view.plain(f"http://{MAPPED}:{p.view.metrics_port}/metrics")

    assert_refused(response, "loopback", host=MAPPED)
    obs.assert_nothing_reached()


def test_a_listen_name_that_does_not_resolve_stops_the_start(
    harness: Harness, topology: Topology, e2e_dir: Path
):
    # Inside the proxy namespace, whose resolver (127.0.0.1:53) has no server here: the
    # lookup fails locally. The proxy cannot know what to refuse, so it does not start.
    config = e2e_dir / "unresolved-listen.yaml"
    config.write_text('network:\n  allowlist:\n    - domain: "*.allowed.test"\n')
    argv = topology.exec_prefix(topology.ns_proxy) + [
        str(EGRESS_PROXY), "run", "--config", str(config),
        "--listen", f"nowhere.allowed.test:{NAMED_PORT}",
        "--metrics", f"{topology.proxy_ip}:{NAMED_METRICS}",
        "--certs", str(e2e_dir / "certs"), "--audit-log", str(e2e_dir / "unresolved.jsonl"),
    ]  # fmt: skip
    child = procs.start("unresolved-listen", argv, e2e_dir, env=proxy_env(harness.secrets[0]))
    try:
        code = child.popen.wait(timeout=60)
    finally:
        child.stop()

    stderr = child.stderr.read_text()
    assert code == 2, stderr
    assert "--listen/--metrics: cannot resolve 'nowhere.allowed.test'" in stderr, stderr
