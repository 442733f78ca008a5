"""End to end, regular mode: the proxy never reaches itself, and a reload never splits a
decision (issue 10, items 5 and 7; docs/configuration.md#destinations-always-refused; docs/configuration.md#audit-log; docs/decisions.md D22, D24).

* Not through the IPv4-mapped spelling of its listen or metrics address (typed by the
  sandbox, or answered by a DNS name the sandbox owns), not when `--listen`/`--metrics`
  are names, and not through any other port of its own host that only a CIDR entry (the
  session config opens the proxy's /30) would open.
* A reload that lands while a request's name is being resolved does not decide that
  request: it is decided and pinned by the configuration it arrived under.

Names only the tests' DNS server answers are served inside the proxy namespace
(testbed/dns_server.py, with `--hold` to keep a lookup in flight).
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

from testbed import procs
from testbed.expect import Observed, assert_refused
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.proxyproc import ProxyProcess, start_proxy
from testbed.rawhttp import Conn, Response
from tests.e2e.conftest import EGRESS_PROXY, REPO, PrivateProxy, proxy_env

pytestmark = [pytest.mark.netns, pytest.mark.both_paths]


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
def test_plain_request_to_the_proxys_own_host_is_proxy_host(
    harness: Harness, obs: Observed, url: str
):
    response = harness.plain(url.format(proxy=harness.proxy_host))

    assert_refused(response, "proxy_host")  # not loopback: the host's own address (issue 48)
    obs.assert_nothing_reached()


@pytest.mark.parametrize(
    "authority",
    [
        "[::ffff:{proxy}]:8080",  # no data is sent: on main the tunnel opened (and would loop)
        "[::ffff:{proxy}]:9464",
        "{proxy}:8443",
    ],
)
def test_connect_to_the_proxys_own_host_is_proxy_host(
    harness: Harness, obs: Observed, authority: str
):
    response = harness.connect(authority.format(proxy=harness.proxy_host))

    assert_refused(response, "proxy_host")
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

    assert_refused(metrics, "proxy_host")
    assert_refused(listen, "proxy_host")


# -- a reload during a request's DNS lookup (D24) -------------------------------------------

SLOW = "slow.allowed.test"  # answered only by the held DNS server below
MAPPED = "mapped-self.allowed.test"  # answered with the proxy's address, IPv4-mapped
RACE_V1 = 'network:\n  allowlist:\n    - domain: "*.allowed.test"\n'
RACE_V2 = RACE_V1 + "    - domain: 198.18.1.0/24\n"  # opens the upstream's reserved range


@pytest.fixture
def held_dns(topology: Topology, e2e_dir: Path) -> Iterator[tuple[JsonLines, Path]]:
    """The tests' DNS server in the proxy namespace, holding answers for SLOW until the
    release file exists (testbed/dns_server.py --hold)."""
    zone, log, release = (e2e_dir / f"race-{n}" for n in ("zone.json", "dns.jsonl", "release"))
    zone.write_text(json.dumps({SLOW: [[UPSTREAM_IP]], MAPPED: [[f"::ffff:{topology.proxy_ip}"]]}))
    log.touch()
    release.unlink(missing_ok=True)
    argv = topology.exec_prefix(topology.ns_proxy) + [
        sys.executable, "-m", "testbed.dns_server", "--listen", "127.0.0.1:53",
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


def test_a_name_answering_the_mapped_spelling_of_the_proxy_is_proxy_host(
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

    assert_refused(response, "proxy_host", host=MAPPED)
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
