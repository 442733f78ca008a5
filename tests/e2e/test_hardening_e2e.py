"""End to end, regular mode against a hostile sandbox (docs/configuration.md#destinations-always-refused; docs/configuration.md#modes-and-protocols; docs/configuration.md#audit-log; issue 3):
HTTP/2 fronting, DNS rebinding and multi-answer names, configuration reload under
traffic, and metric labels that attacker-chosen host names cannot grow.

Rebinding uses the tests' own DNS server (`testbed/dns_server.py`) on 127.0.0.1:53
inside the proxy namespace, where resolv.conf already points; names not in the hosts
file are answered from its script, one answer set per query. The proxies that must see
every lookup run with `--dns-cache 0`; reload and metrics tests use proxies of their own
(`private_proxy`), so that the session proxy's configuration and counters stay untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.bulk_server import pattern_chunks
from testbed.expect import Observed, assert_refused, header_values
from testbed.h2client import exchange
from testbed.harness import Harness, JsonLines, TunnelRefused
from testbed.netns import INTERNAL_IP, UPSTREAM_IP, Topology
from testbed.proxyproc import Samples, record_result
from testbed.rawhttp import Conn
from testbed.streaming import expected_sha256, read_head, receive_body
from tests.e2e.conftest import (
    BULK_PORT,
    BULK_TLS_PORT,
    SECRET_ENV,
    Bulk,
    PrivateProxy,
    scripted_dns,
)

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]


# -- fronting over HTTP/2 (regular mode; transparent mode: test_transparent_e2e.py) ------------


def _h2_get(authority: str, path: str) -> list[tuple[str, str]]:
    return [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", authority),
        (":path", path),
        ("authorization", "Bearer sandbox-h2"),
    ]


@pytest.mark.parametrize(
    "authority",
    [
        "api.allowed.test",  # fronting through an allowed tunnel to get the credential
        "other.allowed.test:8443",  # the tunnel's host, another port
        "notlisted.test",
    ],
)
def test_http2_authority_that_disagrees_with_the_connect_target(
    harness: Harness, obs: Observed, authority: str
):
    with harness.tunnel("other.allowed.test:443", alpn=["h2"]) as conn:
        assert conn.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        result = exchange(
            conn.sock,
            [_h2_get(authority, "/h2-front"), _h2_get("other.allowed.test", "/h2-same")],
        )

    assert result.ended == {1, 3}, result
    assert (result.status(1), result.headers[1].get("x-egress-denied")) == ("403", "host_mismatch")
    assert json.loads(result.bodies[1])["reason"] == "host_mismatch"
    assert result.status(3) == "200", result
    record = obs.only_request()
    assert record["target"] == "/h2-same"
    assert header_values(record, "Authorization") == ["Bearer sandbox-h2"]  # never the secret


# -- DNS rebinding and multi-answer names -------------------------------------------------------

DNS_ZONE = {
    "rebind-tunnel.allowed.test": [[UPSTREAM_IP], ["127.0.0.1"]],
    "rebind-plain.allowed.test": [[UPSTREAM_IP], ["127.0.0.1"]],
    "rebind-plain2.allowed.test": [[UPSTREAM_IP], ["127.0.0.1"]],
    "multi.allowed.test": [["127.0.0.1", INTERNAL_IP, UPSTREAM_IP]],
}
REBIND_CONFIG = """\
network:
  allowlist:
    - domain: "*.allowed.test"
    - domain: 198.18.1.0/24
"""


@pytest.fixture(scope="module")
def dns_log(topology: Topology, e2e_dir: Path) -> Iterator[JsonLines]:
    with scripted_dns("hardening", topology, e2e_dir, DNS_ZONE) as log:
        yield log


@pytest.fixture
def rebind_proxy(private_proxy: Callable[..., PrivateProxy], dns_log: JsonLines) -> PrivateProxy:
    # Every request asks the resolver: the scripted second answer is really used.
    return private_proxy("rebind", REBIND_CONFIG, "--dns-cache", "0")


def _a_answers(dns_log: JsonLines, mark: int, name: str) -> list[list[str]]:
    return [e["answer"] for e in dns_log.since(mark) if e["name"] == name and e["type"] == 1]


def test_rebinding_inside_a_tunnel_never_reaches_loopback(
    rebind_proxy: PrivateProxy, dns_log: JsonLines, obs: Observed
):
    name, mark = "rebind-tunnel.allowed.test", dns_log.mark()
    with rebind_proxy.view.tunnel(f"{name}:443") as conn:  # CONNECT: first answer, upstream
        response = conn.request("GET", "/rebind", [("Host", name)])

    assert obs.traps() == [], obs.traps()
    answers = _a_answers(dns_log, mark, name)
    if response.status == 403:  # the request's own lookup answered loopback: refused
        assert_refused(response, "loopback")
        assert obs.upstream() == []
        assert answers == [[UPSTREAM_IP], ["127.0.0.1"]]
    else:  # or the request went to the address checked for the CONNECT
        assert response.status == 200, response.describe()
        assert obs.only_request()["listener"] == f"{UPSTREAM_IP}:443"
        assert answers[0] == [UPSTREAM_IP]


@pytest.mark.parametrize("kept_alive", [True, False], ids=["same-connection", "new-connection"])
def test_rebinding_between_requests_never_reaches_loopback(
    rebind_proxy: PrivateProxy, dns_log: JsonLines, obs: Observed, kept_alive: bool
):
    name = "rebind-plain.allowed.test" if kept_alive else "rebind-plain2.allowed.test"
    mark = dns_log.mark()
    with rebind_proxy.view.conn() as conn:
        first = conn.request("GET", f"http://{name}/rebind-1", [("Host", name)])
        if kept_alive:
            second = conn.request("GET", f"http://{name}/rebind-2", [("Host", name)])
    if not kept_alive:  # nothing kept open upstream that a second request could reuse
        second = rebind_proxy.view.plain(f"http://{name}/rebind-2")

    assert first.status == 200, first.describe()
    assert obs.traps() == [], obs.traps()
    assert _a_answers(dns_log, mark, name)[0] == [UPSTREAM_IP]
    if second.status == 403:
        assert_refused(second, "loopback")
        assert [r["target"] for r in obs.requests()] == ["/rebind-1"]
        assert _a_answers(dns_log, mark, name) == [[UPSTREAM_IP], ["127.0.0.1"]]
    else:  # pinned to the checked address
        assert second.status == 200, second.describe()
        assert {r["listener"] for r in obs.requests()} == {f"{UPSTREAM_IP}:80"}


def test_name_with_loopback_internal_and_upstream_answers_uses_only_the_upstream(
    rebind_proxy: PrivateProxy, dns_log: JsonLines, obs: Observed
):
    mark = dns_log.mark()
    response = rebind_proxy.view.plain("http://multi.allowed.test/multi")

    assert response.status == 200, response.describe()
    record = obs.only_request()  # also: no trap (loopback in P, the internal address in U)
    assert (record["listener"], record["target"]) == (f"{UPSTREAM_IP}:80", "/multi")
    assert _a_answers(dns_log, mark, "multi.allowed.test") == [
        ["127.0.0.1", INTERNAL_IP, UPSTREAM_IP]
    ]


# -- reload ---------------------------------------------------------------------------------------------

RELOAD_V1 = f"""\
network:
  allowlist:
    - domain: other.allowed.test
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""
RELOAD_V2 = """\
network:
  allowlist:
    - domain: other.allowed.test
    - domain: plain.allowed.test
    - domain: 198.18.1.0/24
"""
INVALID = {
    "yaml-syntax": "network: [unclosed\n",
    "loopback-entry": "network:\n  allowlist:\n    - domain: 127.0.0.1\n",
    "missing-variable": (
        "network:\n  allowlist:\n    - domain: api.allowed.test\n      transform:\n"
        '        Authorization: "Bearer ${E2E_UNSET_VARIABLE}"\n'
    ),
    "unknown-key": "network:\n  allowlst:\n    - domain: plain.allowed.test\n",
}


def _gauge(samples: Samples, name: str) -> float:
    return samples[(name, ())]


# These tests count SIGHUP reloads exactly: the file watch (which would see each write too)
# is off; tests/e2e/test_lifecycle_e2e.py tests it.
SIGHUP_ONLY = ("--watch-interval", "0")


def _status(p: PrivateProxy, host: str) -> tuple[int, str | None]:
    response = p.view.plain(f"http://{host}/reload")
    return response.status, response.header("X-Egress-Denied")


def test_sighup_with_a_valid_file_changes_decisions(
    private_proxy: Callable[..., PrivateProxy], obs: Observed
):
    p = private_proxy("reload", RELOAD_V1, *SIGHUP_ONLY)
    assert _status(p, "other.allowed.test") == (200, None)
    assert _status(p, "plain.allowed.test") == (403, "not_allowlisted")

    p.process.config.write_text(RELOAD_V2)
    counts = p.process.reload()

    assert counts == {"ok": 1.0, "failed": 0.0}
    assert _status(p, "plain.allowed.test") == (200, None)
    assert _status(p, "api.allowed.test") == (403, "not_allowlisted")
    assert _status(p, "other.allowed.test") == (200, None)
    assert _gauge(p.process.scrape(), "egress_allowlist_entries") == 3
    assert "configuration reloaded" in p.process.child.stderr.read_text()
    assert [r["target"] for r in obs.requests()] == ["/reload"] * 3


@pytest.mark.parametrize("case", sorted(INVALID))
def test_sighup_with_an_invalid_file_keeps_the_running_configuration(
    private_proxy: Callable[..., PrivateProxy], harness: Harness, case: str
):
    p = private_proxy("reload-bad", RELOAD_V1, *SIGHUP_ONLY)
    entries = _gauge(p.process.scrape(), "egress_allowlist_entries")

    p.process.config.write_text(INVALID[case])
    counts = p.process.reload()

    assert counts == {"ok": 0.0, "failed": 1.0}
    stderr = p.process.child.stderr.read_text()
    refused = [line for line in stderr.splitlines() if "reload refused" in line]
    assert refused, stderr
    assert all(p.process.config.name in line for line in refused), stderr
    assert harness.secrets[0] not in stderr
    assert _status(p, "other.allowed.test") == (200, None)  # the old configuration serves
    assert _status(p, "plain.allowed.test") == (403, "not_allowlisted")
    assert _gauge(p.process.scrape(), "egress_allowlist_entries") == entries
    assert p.process.child.alive()

    p.process.config.write_text(RELOAD_V2)  # and a later valid file still loads
    assert p.process.reload() == {"ok": 1.0, "failed": 1.0}
    assert _status(p, "plain.allowed.test") == (200, None)


def test_reloads_under_traffic_keep_transfers_and_requests_in_flight(
    private_proxy: Callable[..., PrivateProxy], bulk: Bulk, harness: Harness
):
    p, size = private_proxy("reload-live", RELOAD_V1, *SIGHUP_ONLY), 256 * 1024 * 1024
    statuses: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def background() -> None:  # small requests on one kept-alive connection, all the while
        try:
            with p.view.conn() as conn:
                while not stop.is_set() and len(statuses) < 100_000:
                    target = f"http://other.allowed.test:{BULK_PORT}/ok"
                    host = [("Host", f"other.allowed.test:{BULK_PORT}")]
                    statuses.append(conn.request("GET", target, host).status)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    mark = bulk.log.mark()
    host = f"api.allowed.test:{BULK_TLS_PORT}"
    with p.view.tunnel(host) as conn:  # a download on the host the reload removes
        conn.sock.settimeout(30)
        conn.send(f"GET /download?size={size} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, headers, rest = read_head(conn.sock)
        first = receive_body(conn.sock, rest, 1024 * 1024)
        worker = threading.Thread(target=background, daemon=True)
        worker.start()
        try:
            p.process.config.write_text(RELOAD_V2)
            assert p.process.reload() == {"ok": 1.0, "failed": 0.0}
            p.process.config.write_text(INVALID["loopback-entry"])
            assert p.process.reload() == {"ok": 1.0, "failed": 1.0}
            during = len(statuses)
            rest_of_body = receive_body(conn.sock, b"", size - first.count)
        finally:
            stop.set()
            worker.join(timeout=30)

    assert status == 200
    assert int(headers["content-length"]) == size
    assert first.count + rest_of_body.count == size
    sent = bulk.log.wait_for(mark, lambda e: e["event"] == "download")
    assert sent["bytes"] == size
    assert sent["sha256"] == expected_sha256(size)
    # Intact: the digest of what arrived in two parts equals the server's.
    received = _digest_of_parts(size, first.count)
    assert (first.sha256, rest_of_body.sha256) == received
    assert errors == [], errors
    assert during > 0, (during, set(statuses))
    assert set(statuses) == {200}, (during, set(statuses))
    # The new configuration is in force for new decisions: the transfer's host is gone.
    with pytest.raises(TunnelRefused) as refused, p.view.tunnel(host):
        pass
    assert_refused(refused.value.response, "not_allowlisted")
    record_result("reload_under_traffic", {"background_requests": len(statuses)})


def _digest_of_parts(size: int, split: int) -> tuple[str, str]:
    """The sha256 of the pattern's first `split` bytes and of the rest, separately."""
    head, tail, seen = hashlib.sha256(), hashlib.sha256(), 0
    for chunk in pattern_chunks(size):
        cut = max(0, min(len(chunk), split - seen))
        head.update(chunk[:cut])
        tail.update(chunk[cut:])
        seen += len(chunk)
    return head.hexdigest(), tail.hexdigest()


# -- metric labels under attacker-chosen names ----------------------------------------------------------

# About 260 refused requests/s on this 2-core machine (the proxy is CPU-bound), so 10^4 in
# ~40 s; the deadline keeps a slower machine from running away.
FLOOD = int(os.environ.get("EGRESS_E2E_FLOOD", "10000"))
FLOOD_SECONDS = 40.0
CLOSE = "Connection: close\r\n\r\n"
HOSTILE_HOSTS = [
    'evil"quote.test',
    "it's.test",
    "back\\slash.test",
    'label="injected",x.test',
    "{brace}.test",
    "# HELP egress_requests_total pwned",
    "a%0d%0aInjected:%20x.test",
    "tab\tinside.test",
    "ünïcode.test",
    "a" * 300 + ".test",
    "a." * 100 + "test",
    "127.0.0.1\r\nX-Injected: 1",
    "host\rcarriage.test",
]
HYGIENE_CONFIG = """\
network:
  allowlist:
    - domain: other.allowed.test
    - domain: 198.18.1.0/24
"""


def _series(samples: Samples) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return set(samples)


def _send_raw(p: PrivateProxy, data: bytes) -> bytes:
    """One raw request on a fresh connection; whatever comes back (or nothing)."""
    with socket.create_connection((p.view.proxy_host, p.view.proxy_port), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:
            pass
    return received


def _flood(p: PrivateProxy, total: int, clients: int, deadline: float) -> tuple[int, list[str]]:
    """`total` refused requests for random subdomains over kept-alive connections."""
    done: list[int] = [0] * clients
    problems: list[str] = []

    def client(index: int) -> None:
        conn: Conn | None = None
        try:
            for n in range(total // clients):
                if time.monotonic() > deadline:
                    return
                if conn is None or n % 500 == 0:
                    if conn is not None:
                        conn.close()
                    conn = p.view.conn()
                host = f"r{secrets.token_hex(6)}.flood{index}.test"
                response = conn.request("GET", f"http://{host}/", [("Host", host)])
                if response.header("X-Egress-Denied") != "not_allowlisted":
                    problems.append(f"{host}: {response.status}")
                    return
                done[index] += 1
        except OSError as exc:
            problems.append(repr(exc))
        finally:
            if conn is not None:
                conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(1.0, deadline - time.monotonic() + 10))
    return sum(done), problems


@pytest.mark.slow  # ~40 s: 10^4 refused requests
def test_hostile_host_names_create_no_metric_series(private_proxy: Callable[..., PrivateProxy]):
    p = private_proxy("hygiene", HYGIENE_CONFIG)
    before = p.process.scrape()

    outcomes = {}
    for host in HOSTILE_HOSTS:
        for request in (
            f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n{CLOSE}",
            f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n{CLOSE}",
            f"GET http://other.allowed.test/ HTTP/1.1\r\nHost: {host}\r\n{CLOSE}",
        ):
            answer = _send_raw(p, request.encode("utf-8", "surrogateescape"))
            outcomes[(host[:40], request[:7])] = answer.split(b"\r\n", 1)[0].decode("latin-1")
    middle = p.process.scrape()

    started = time.monotonic()
    flooded, problems = _flood(p, FLOOD, clients=2, deadline=started + FLOOD_SECONDS)
    elapsed = time.monotonic() - started
    after = p.process.scrape()
    text = p.process.metrics_text()

    record_result(
        "metrics_hygiene_flood",
        {"requests": flooded, "seconds": round(elapsed, 1), "per_s": round(flooded / elapsed)},
    )
    assert problems == [], problems[:5]
    assert not any(o.startswith("HTTP/1.1 2") for o in outcomes.values()), outcomes
    assert _series(middle) == _series(before), _series(middle) ^ _series(before)
    assert _series(after) == _series(before), _series(after) ^ _series(before)
    key = ("egress_requests_total", (("decision", "deny"), ("reason", "not_allowlisted")))
    assert after[key] - middle[key] == flooded  # every flood request was decided and counted
    assert flooded >= min(FLOOD, 5000), f"only {flooded} requests in {elapsed:.0f} s"
    for marker in ("flood", "quote", "pwned", "Injected", "ünïcode", "carriage"):
        assert marker not in text, marker
