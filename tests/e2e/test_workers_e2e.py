"""`--workers N`: several proxy processes share one port, with one set of metrics.

A second proxy runs beside the session's, in the same namespace, with the same
configuration and CA, as `--workers 2` on its own ports.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import procs
from testbed.expect import Observed, header_values
from testbed.harness import AuditLines, Harness
from testbed.netns import Topology
from testbed.testca import Pki
from tests.e2e.conftest import EGRESS_PROXY, proxy_env

pytestmark = pytest.mark.netns

PORT, METRICS = 8090, 9490


def sample(text: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert match, f"{series} missing from /metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def workers(
    harness: Harness, topology: Topology, pki: Pki, e2e_dir: Path
) -> Iterator[tuple[Harness, procs.Child]]:
    audit = e2e_dir / "workers-audit.jsonl"
    argv = topology.exec_prefix(topology.ns_proxy) + [
        str(EGRESS_PROXY), "run", "--workers", "2",
        "--config", str(e2e_dir / "egress.yaml"),
        "--listen", f"{topology.proxy_ip}:{PORT}",
        "--metrics", f"{topology.proxy_ip}:{METRICS}",
        "--certs", str(e2e_dir / "certs"),
        "--audit-log", str(audit),
        "--upstream-ca", str(pki.ca_cert),
    ]  # fmt: skip
    child = procs.start("proxy-workers", argv, e2e_dir, env=proxy_env(harness.secrets[0]))
    view = dataclasses.replace(
        harness, proxy_port=PORT, metrics_port=METRICS, audit_log=AuditLines(audit), responses=[]
    )

    def healthy() -> bool:
        try:
            return view.healthz() == 200
        except OSError:
            return False

    try:
        procs.wait_until("workers /healthz", healthy, timeout=60, child=child)
        yield view, child
    finally:
        child.stop()


def listeners(topology: Topology) -> set[str]:
    out = subprocess.run(
        [*topology.exec_prefix(topology.ns_proxy), "ss", "-Htlnp", f"sport = :{PORT}"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout  # fmt: skip
    return set(re.findall(r"pid=(\d+)", out))


def test_two_processes_share_the_listen_port(
    workers: tuple[Harness, procs.Child], topology: Topology
):
    assert len(listeners(topology)) == 2


def test_every_worker_decides_injects_and_counts(
    workers: tuple[Harness, procs.Child], obs: Observed
):
    view, _ = workers
    audit_mark = view.audit_log.mark()
    before = sample(
        view.metrics_text(), 'egress_requests_total{decision="allow",reason="allowlisted"}'
    )

    statuses = [view.https("api.allowed.test:443", f"/worker-{n}").status for n in range(12)]

    assert statuses == [200] * 12
    records = obs.requests()
    assert sorted(r["target"] for r in records) == sorted(f"/worker-{n}" for n in range(12))
    assert all(header_values(r, "Authorization") == [f"Bearer {view.secrets[0]}"] for r in records)
    after = sample(
        view.metrics_text(), 'egress_requests_total{decision="allow",reason="allowlisted"}'
    )
    assert after - before == 24  # 12 CONNECTs and 12 requests, summed over both workers
    assert len(view.audit_log.wait_count(audit_mark, 24)) == 24


def test_sighup_reaches_every_worker(workers: tuple[Harness, procs.Child]):
    view, child = workers
    before = sample(view.metrics_text(), 'egress_config_reloads_total{result="ok"}')
    child.popen.send_signal(signal.SIGHUP)

    def reloaded() -> bool:
        return sample(view.metrics_text(), 'egress_config_reloads_total{result="ok"}') == before + 2

    procs.wait_until("both workers reloaded", reloaded, timeout=20, child=child)
