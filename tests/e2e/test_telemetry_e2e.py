"""End to end, the operator's metrics of issue 14 (addons/telemetry.py, proxy/resolver.py)
and `--log-format json`, with exact counts after traffic this module sends itself.

Every test uses a proxy of its own (`private_proxy`), so no other test's traffic moves
its counters. Names outside the hosts file are answered by the tests' scripted DNS
server (`testbed/dns_server.py`) on 127.0.0.1:53 inside the proxy namespace,
where resolv.conf points; never by the machine's resolver.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_egress.common.serve import version
from testbed import procs
from testbed.expect import assert_refused
from testbed.harness import JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.proxyproc import ProxyProcess, Samples
from tests.e2e.conftest import PrivateProxy, scripted_dns

pytestmark = pytest.mark.netns

# Not in any certificate of the test PKI: the upstream's certificate cannot verify.
WRONG_CERT = "wrongcert.allowed.test"
DNS_ZONE = {WRONG_CERT: [[UPSTREAM_IP]], "looked-up.allowed.test": [[UPSTREAM_IP]]}
CONFIG = """\
network:
  allowlist:
    - domain: "*.allowed.test"
    - domain: 198.18.1.0/24
"""
CLOSED_PORT = 81  # nothing listens there in the upstream namespace: the kernel refuses


@pytest.fixture(scope="module")
def dns_log(topology: Topology, e2e_dir: Path) -> Iterator[JsonLines]:
    with scripted_dns("telemetry", topology, e2e_dir, DNS_ZONE) as log:
        yield log


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy], dns_log: JsonLines) -> PrivateProxy:
    return private_proxy("telemetry", CONFIG, "--dns-cache", "0")


TELEMETRY = {
    "client_tls": ("egress_client_tls_failures_total", {}),
    "connect": ("egress_upstream_errors_total", {"kind": "connect"}),
    "tls": ("egress_upstream_errors_total", {"kind": "tls"}),
    "upstream": ("egress_bytes_total", {"direction": "upstream"}),
    "downstream": ("egress_bytes_total", {"direction": "downstream"}),
    "dns_ok": ("egress_dns_lookups_total", {"result": "ok"}),
    "dns_failed": ("egress_dns_lookups_total", {"result": "failed"}),
    "dns_timeout": ("egress_dns_lookups_total", {"result": "timeout"}),
    "dns_timed": ("egress_dns_lookup_seconds_count", {}),
}


def telemetry(samples: Samples) -> dict[str, float]:
    found = {}
    for short, (name, labels) in TELEMETRY.items():
        key = (name, tuple(sorted(labels.items())))
        assert key in samples, f"{name}{labels} is not exported"
        found[short] = samples[key]
    return found


def settled(process: ProxyProcess, expected: dict[str, float]) -> dict[str, float]:
    """The counters once they reached `expected` (hooks run after the client's answer),
    or as they are after a bounded wait: the caller compares exactly."""
    seen: dict[str, float] = {}

    def reached() -> bool:
        nonlocal seen
        seen = telemetry(process.scrape())
        return seen == expected

    with contextlib.suppress(TimeoutError):
        procs.wait_until("telemetry counters", reached, timeout=5, child=process.child)
    return seen


ZERO = dict.fromkeys(TELEMETRY, 0.0)


def distrust_the_ca(proxy: PrivateProxy) -> None:
    """CONNECT, then a TLS handshake that trusts the system roots only, not the proxy CA."""
    conn = proxy.view.conn()
    try:
        assert conn.connect("api.allowed.test:443").status == 200
        distrustful = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            conn.start_tls(distrustful, "api.allowed.test")
    finally:
        conn.close()


def test_a_client_that_does_not_trust_the_ca_counts_one_failure(proxy: PrivateProxy):
    before = telemetry(proxy.process.scrape())
    assert before == ZERO
    distrust_the_ca(proxy)
    # The CONNECT's own lookup of api.allowed.test (hosts file) is the one DNS lookup.
    expected = {**ZERO, "client_tls": 1.0, "dns_ok": 1.0, "dns_timed": 1.0}
    assert settled(proxy.process, expected) == expected


def test_an_upstream_that_refuses_tcp_counts_one_connect_error(proxy: PrivateProxy):
    response = proxy.view.plain(f"http://{UPSTREAM_IP}:{CLOSED_PORT}/refused")
    assert response.status == 502, response
    expected = {**ZERO, "connect": 1.0}  # an address: nothing to look up
    assert settled(proxy.process, expected) == expected


def test_an_upstream_certificate_that_does_not_verify_counts_one_tls_error(
    proxy: PrivateProxy, dns_log: JsonLines
):
    mark = dns_log.mark()
    response = proxy.view.https(f"{WRONG_CERT}:443", "/wrong-cert")
    assert response.status == 502, response
    assert {e["name"] for e in dns_log.since(mark)} == {WRONG_CERT}
    # `--dns-cache 0`: the CONNECT and the request inside it each look the name up.
    expected = {**ZERO, "tls": 1.0, "dns_ok": 2.0, "dns_timed": 2.0}
    assert settled(proxy.process, expected) == expected


def test_an_unknown_name_counts_one_failed_lookup(proxy: PrivateProxy, dns_log: JsonLines):
    mark = dns_log.mark()
    response = proxy.view.plain("http://nxdomain.allowed.test/missing")
    assert_refused(response, "dns_failure", status=502)
    assert {e["name"] for e in dns_log.since(mark)} == {"nxdomain.allowed.test"}
    expected = {**ZERO, "dns_failed": 1.0, "dns_timed": 1.0}
    assert settled(proxy.process, expected) == expected


def test_bytes_by_direction_are_the_bodies_relayed(proxy: PrivateProxy):
    body = b"u" * 5000
    response = proxy.view.https("api.allowed.test:443", "/bytes", method="POST", body=body)
    assert response.status == 200, response
    expected = {
        **ZERO,
        "upstream": 5000.0,
        "downstream": float(len(response.body)),
        "dns_ok": 2.0,  # `--dns-cache 0`: the CONNECT's lookup and the request's
        "dns_timed": 2.0,
    }
    assert settled(proxy.process, expected) == expected


def test_build_info_and_process_series(proxy: PrivateProxy):
    samples = proxy.process.scrape()
    assert samples[("egress_build_info", (("version", version()),))] == 1.0
    assert [n for n, _labels in samples if n == "egress_build_info"] == ["egress_build_info"]
    # process_start_time_seconds is the proxy process's own start, from /proc.
    ticks = os.sysconf("SC_CLK_TCK")
    start_ticks = int(
        Path(f"/proc/{proxy.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    )
    boot = next(
        float(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    started = samples[("process_start_time_seconds", ())]
    assert started == pytest.approx(boot + start_ticks / ticks, abs=0.01)


def test_log_format_json_writes_the_banner_as_json_lines(
    private_proxy: Callable[..., PrivateProxy], topology: Topology
):
    started = private_proxy("json-logs", CONFIG, "--log-format", "json")
    lines = started.process.child.stderr.read_text().splitlines()
    documents = [json.loads(line) for line in lines]
    messages = [d["message"] for d in documents]
    assert (
        messages[0] == f"regular proxy listening on {topology.proxy_ip}:{started.view.proxy_port}"
    )
    assert messages[1] == (
        f"metrics on http://{topology.proxy_ip}:{started.view.metrics_port}/metrics "
        "(health: /healthz)"
    )
    assert {(d["level"], d["logger"]) for d in documents} == {("info", "egress")}
    assert all(d["time"].endswith("Z") for d in documents)

    # mitmproxy's own messages take the same format.
    distrust_the_ca(started)
    seen: list[dict[str, Any]] = []

    def logged() -> bool:
        lines = started.process.child.stderr.read_text().splitlines()[len(documents) :]
        seen[:] = [json.loads(line) for line in lines]
        return any("Client TLS handshake failed" in d["message"] for d in seen)

    procs.wait_until("the handshake failure logged", logged, timeout=5, child=started.process.child)
    [failure] = [d for d in seen if "Client TLS handshake failed" in d["message"]]
    assert (failure["level"], failure["logger"].split(".")[0]) == ("warning", "mitmproxy"), failure
    assert "does not trust the proxy's certificate for api.allowed.test" in failure["message"]
