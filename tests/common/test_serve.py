"""The shared metrics server (common/serve.py): build info, process series, bound address."""

from __future__ import annotations

import socket
import struct
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from sandbox_egress.common.endpoint import format_endpoint
from sandbox_egress.common.serve import MetricsServer, add_build_info, version


def test_build_info_and_process_series_once_per_registry() -> None:
    registry = CollectorRegistry()
    first = add_build_info(registry, "egress")
    assert add_build_info(registry, "egress") is first  # a second call is harmless
    assert registry.get_sample_value("egress_build_info", {"version": version()}) == 1.0
    assert version() != "unknown"  # installed with `make install`
    start = registry.get_sample_value("process_start_time_seconds")
    assert start is not None and start > 1_600_000_000


def test_serves_metrics_on_the_port_it_got() -> None:
    registry = CollectorRegistry()
    add_build_info(registry, "hookrunner")
    server = MetricsServer(("127.0.0.1", 0), registry)
    server.start()
    try:
        host, port = server.address
        assert (host, server.url) == ("127.0.0.1", f"http://127.0.0.1:{port}/metrics")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(server.url, timeout=5) as response:
            text = response.read().decode()
        assert f'hookrunner_build_info{{version="{version()}"}} 1.0' in text.splitlines()
    finally:
        server.stop()


def test_idle_connections_are_bounded_in_number_and_time() -> None:
    # issue 21: 150 idle connections held 150 threads and descriptors, without limit.
    import socket

    refused: list[int] = []
    server = MetricsServer(
        ("127.0.0.1", 0),
        CollectorRegistry(),
        max_connections=2,
        request_timeout=0.5,
        on_refused=lambda: refused.append(1),
    )
    server.ready.set()
    server.start()
    try:
        idle = [socket.create_connection(server.address, timeout=10) for _ in range(2)]
        extra = socket.create_connection(server.address, timeout=10)
        assert extra.recv(1) == b""  # closed at once: both slots are taken
        extra.close()
        assert refused == [1]
        for sock in idle:
            assert sock.recv(1) == b""  # closed by the server after its request timeout
            sock.close()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"http://{server.address[0]}:{server.address[1]}/healthz"
        with opener.open(url, timeout=5) as response:
            assert response.status == 200
    finally:
        server.stop()


PARTIAL_PROBES = [
    ("nothing", b""),
    ("half-a-request-line", b"GET /hea"),
    ("headers-unfinished", b"GET /healthz HTTP/1.1\r\nHost: x"),
    ("whole-request", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
]


@pytest.mark.parametrize(
    "payload", [p[1] for p in PARTIAL_PROBES], ids=[p[0] for p in PARTIAL_PROBES]
)
def test_a_probe_that_hangs_up_early_prints_no_traceback(
    payload: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 43: a load balancer's or kubelet's probe that sends part of a request and
    resets the connection made the server print `Exception occurred during processing of
    request` and a traceback to stderr. A peer hanging up is not news."""
    server = MetricsServer(("127.0.0.1", 0), CollectorRegistry(), request_timeout=2)
    server.daemon_threads = False  # so that stop() waits for the handler's thread
    server.ready.set()
    server.start()
    try:
        for _ in range(3):
            probe = socket.create_connection(server.address, timeout=5)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            probe.sendall(payload)
            probe.close()  # linger 0: a reset, as a probe that gives up sends
        with urllib.request.urlopen(f"http://{format_endpoint(*server.address)}/healthz") as r:
            assert r.status == 200  # still serving
    finally:
        server.stop()  # joins every handler thread: whatever they printed is printed
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
