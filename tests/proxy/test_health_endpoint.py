"""/healthz of the metrics server (common/serve.py): starting, ready, draining, a wedged loop."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from sandbox_egress.common.serve import STALL_S, MetricsServer


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    served = MetricsServer(("127.0.0.1", 0), CollectorRegistry())
    served.start()
    try:
        yield served
    finally:
        served.stop()


def healthz(server: MetricsServer) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=5)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_starting_then_ready(server: MetricsServer) -> None:
    assert healthz(server) == (503, b"starting\n")
    server.ready.set()
    server.heartbeat = time.monotonic()
    assert healthz(server) == (200, b"ok\n")


def test_a_loop_that_stopped_stamping_is_unhealthy(server: MetricsServer) -> None:
    server.ready.set()
    server.heartbeat = time.monotonic() - STALL_S - 1
    assert healthz(server) == (503, b"event loop stalled\n")
    server.heartbeat = time.monotonic()
    assert healthz(server) == (200, b"ok\n")


def test_draining_is_unhealthy(server: MetricsServer) -> None:
    server.ready.set()
    server.draining.set()
    assert healthz(server) == (503, b"draining\n")
