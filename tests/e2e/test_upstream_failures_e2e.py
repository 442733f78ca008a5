"""End to end, the proxy's own answer when an allowed request's upstream fails
(docs/configuration.md#when-the-proxy-fails; D352-D354; issues 43 and 48).

Real upstreams in the upstream namespace: a port where nothing listens (the kernel
refuses), a server that resets, one that closes, one that answers bytes that are not
HTTP, one that never answers (the proxy runs with `--upstream-timeout 2`), and one whose
SYNs are dropped (`--upstream-connect-timeout 2`). Each failure must be the product's
JSON `egress_failed` with its reason and `X-Egress-Denied`, never mitmproxy's page
(`Server: mitmproxy`, HTML); the audit line must say `deny` with the reason and the
status; stderr must say it once per host and reason (not per request); the metric
`egress_upstream_failures_total{reason}` must count each.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.netns import UPSTREAM_IP, Topology
from testbed.rawhttp import Response
from testbed.testca import Pki
from tests.e2e.conftest import PrivateProxy, _start_and_wait

pytestmark = pytest.mark.netns

CLOSED = 81  # nothing listens there (test_telemetry_e2e.py's CLOSED_PORT)
RESET, CLOSE, SILENT, GARBAGE, DROPPED, H2 = 9561, 9562, 9563, 9564, 9565, 9566
CONFIG = f"""\
network:
  allowlist:
    - domain: {UPSTREAM_IP}
"""


@dataclass(frozen=True)
class Failing:
    log: Path
    h2_log: Path


@pytest.fixture(scope="module")
def failing(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Failing]:
    log, ready = e2e_dir / "failing.jsonl", e2e_dir / "failing.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.failing_server",
        "--reset", f"{UPSTREAM_IP}:{RESET}", "--close", f"{UPSTREAM_IP}:{CLOSE}",
        "--silent", f"{UPSTREAM_IP}:{SILENT}", "--garbage", f"{UPSTREAM_IP}:{GARBAGE}",
        "--silent", f"{UPSTREAM_IP}:{DROPPED}", "--log", str(log), "--ready", str(ready),
    ]  # fmt: skip
    drop = ["iptables", "-w", "-I", "INPUT", "-p", "tcp", "--dport", str(DROPPED), "-j", "DROP"]
    h2_log, h2_ready = e2e_dir / "failing-h2.jsonl", e2e_dir / "failing-h2.ready"
    h2_argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, "-m", "testbed.h2_echo", "--log", str(h2_log), "--ready", str(h2_ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{H2}", "--alpn", "h2",
    ]  # fmt: skip
    child = _start_and_wait("failing-upstream", argv, e2e_dir, ready)
    h2_child = _start_and_wait("failing-h2-upstream", h2_argv, e2e_dir, h2_ready)
    in_ns = topology.exec_prefix(topology.ns_upstream)
    subprocess.run(in_ns + drop, check=True, timeout=30)
    try:
        yield Failing(log, h2_log)
    finally:
        undo = [*drop[:2], "-D", *drop[4:]]
        subprocess.run(in_ns + undo, check=False, timeout=30)
        h2_child.stop()
        child.stop()


@pytest.fixture
def proxy(private_proxy: Callable[..., PrivateProxy], failing: Failing) -> PrivateProxy:
    return private_proxy(
        "failing", CONFIG, "--upstream-timeout", "2", "--upstream-connect-timeout", "2"
    )


def _assert_failed(response: Response, reason: str, status: int) -> None:
    detail = response.describe()
    assert response.status == status, detail
    assert response.header_all("X-Egress-Denied") == [reason], detail
    assert response.header("Server") is None, detail  # never `Server: mitmproxy ...`
    assert (response.header("Content-Type") or "").startswith("application/json"), detail
    body = json.loads(response.body)
    assert body["error"] == "egress_failed" and body["reason"] == reason, detail
    assert body["message"] and body["host"] == UPSTREAM_IP, detail
    assert b"<html" not in response.body.lower() and b"mitmproxy" not in response.body.lower()


def _audited(proxy: PrivateProxy, port: int) -> dict:
    return proxy.view.audit_log.wait_for(0, lambda a: a["port"] == port and a["method"] == "GET")


CASES = [
    (CLOSED, "upstream_refused", 502),
    (RESET, "upstream_reset", 502),
    (CLOSE, "upstream_reset", 502),
    (GARBAGE, "upstream_reset", 502),
    (SILENT, "upstream_timeout", 504),
    (DROPPED, "upstream_timeout", 504),
]
IDS = ["nothing-listens", "reset", "closed", "not-http", "never-answers", "syn-dropped"]


@pytest.mark.parametrize(("port", "reason", "status"), CASES, ids=IDS)
def test_a_failed_upstream_is_the_products_json_audited_and_said(
    proxy: PrivateProxy, port: int, reason: str, status: int
) -> None:
    """Failed before: mitmproxy's HTML 502 (`[Errno 111] Connect call failed`), the audit
    line `allow` with `status: null`, nothing on stderr; a silent upstream hung."""
    view = proxy.view
    started = time.monotonic()
    response = view.plain(f"http://{UPSTREAM_IP}:{port}/x")
    _assert_failed(response, reason, status)
    if reason == "upstream_timeout":
        assert time.monotonic() - started < 15  # the 2 s bound (plus the 1 s sweep)
    line = _audited(proxy, port)
    assert (line["decision"], line["reason"], line["status"]) == ("deny", reason, status)
    assert line["rule"] == UPSTREAM_IP
    said = [
        text
        for text in view.proxy_stderr.read_text().splitlines()
        if f"upstream {UPSTREAM_IP}:{port} failed" in text
    ]
    assert len(said) == 1 and said[0].endswith(f"answered {status} {reason}"), said
    samples = proxy.process.scrape()
    assert samples[("egress_upstream_failures_total", (("reason", reason),))] == 1


def test_inside_an_intercepted_tunnel_too(proxy: PrivateProxy) -> None:
    response = proxy.view.https(f"{UPSTREAM_IP}:{CLOSED}", "/in-tls")
    _assert_failed(response, "upstream_refused", 502)
    line = _audited(proxy, CLOSED)
    assert (line["scheme"], line["decision"], line["reason"]) == (
        "https",
        "deny",
        "upstream_refused",
    )


def test_the_same_failure_again_is_counted_not_said_again(proxy: PrivateProxy) -> None:
    for _ in range(3):
        _assert_failed(
            proxy.view.plain(f"http://{UPSTREAM_IP}:{RESET}/again"), "upstream_reset", 502
        )
    view = proxy.view
    view.audit_log.wait_count(0, 3)
    lines = [t for t in view.proxy_stderr.read_text().splitlines() if "failed" in t]
    assert len(lines) == 1, lines  # one line per host and reason per 10 s
    samples = proxy.process.scrape()
    assert samples[("egress_upstream_failures_total", (("reason", "upstream_reset"),))] == 3


def _curl_h2(proxy: PrivateProxy, url: str) -> tuple[int, dict[str, str], bytes]:
    """curl with its default ALPN offers (h2, http/1.1) through the proxy."""
    v = proxy.view
    ran = subprocess.run(
        ["curl", "-sS", "--http2", "--max-time", "30", "-D", "-", "--cacert", str(v.proxy_ca),
         "--proxy", f"http://{v.proxy_host}:{v.proxy_port}", url],
        capture_output=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr.decode()[-500:]
    heads = ran.stdout.split(b"\r\n\r\n")
    head, body = heads[1], b"\r\n\r\n".join(heads[2:])  # after the CONNECT's 200
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    ("port", "path", "reason"),
    [(H2, "/reset", "upstream_reset"), (CLOSED, "/refused", "upstream_refused")],
    ids=["h2-upstream-resets-the-stream", "h2-client-nothing-listens"],
)
def test_an_http2_client_gets_the_json_too(
    proxy: PrivateProxy, failing: Failing, port: int, path: str, reason: str
) -> None:
    status, headers, body = _curl_h2(proxy, f"https://{UPSTREAM_IP}:{port}{path}")
    assert (status, headers.get("x-egress-denied")) == (502, reason), (headers, body[:300])
    assert "server" not in headers and headers["content-type"] == "application/json"
    assert json.loads(body)["error"] == "egress_failed"
    line = _audited(proxy, port)
    assert (line["decision"], line["reason"], line["status"]) == ("deny", reason, 502)
