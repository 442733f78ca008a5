"""What the memory-bound tests share: the proxy, the hostile upstream, and measuring.

`Measured` samples a proxy's VmRSS while a block runs and records the growth over the
idle baseline; `GROWTH_BOUND_MIB` is the bound every path must stay under, for `SIZE`
(256 MiB, `EGRESS_E2E_MEMORY_BYTES`) going through. The fixture `proxy` (a fresh
proxy per test, so one test's memory never hides in another's) is imported by the test
modules (as `proxy_fixture`: pytest finds it by its `name`); the hostile upstream
(testbed/hostile_server.py) is the session fixture `hostile` of tests/e2e/conftest.py,
one server for every module.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from testbed.proxyproc import ProxyProcess, RssSampler, record_result
from testbed.streaming import read_head
from tests.e2e.conftest import (
    BULK_TLS_PORT,
    SECRET_ENV,
    Bulk,
    PrivateProxy,
    relaying,
)

MIB = 1 << 20
SIZE = int(os.environ.get("EGRESS_E2E_MEMORY_BYTES", str(256 * MIB)))
# The proxy idles at ~77 MiB. A streamed transfer holds a few 64 KiB read buffers, the TLS
# and HTTP/2 windows and the largest message the bounds allow (16 MiB of WebSocket);
# 64 MiB is a quarter of what goes through, so buffering any body, head or message whole
# would exceed it.
GROWTH_BOUND_MIB = 64
TIMEOUT = 30.0

CONFIG = f"""\
network:
  allowlist:
    - domain: "*"
    - domain: api.allowed.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
    - domain: 198.18.1.0/24
"""


@pytest.fixture(name="proxy")
def proxy_fixture(
    private_proxy: Callable[..., PrivateProxy], bulk: Bulk, body_relay: bool
) -> PrivateProxy:
    p = relaying(private_proxy, body_relay)("memory", CONFIG)  # off and on (issue 49)
    with p.view.tunnel(f"api.allowed.test:{BULK_TLS_PORT}") as conn:  # warm up TLS
        assert conn.request("GET", "/ok", [("Host", "api.allowed.test")]).status == 200
    return p


class Measured:
    """The proxy's memory while a block runs: baseline, sampled peak, growth (MiB)."""

    def __init__(self, process: ProxyProcess, key: str) -> None:
        self.process, self.key = process, key
        self.figures: dict[str, float] = {}

    @contextlib.contextmanager
    def run(self) -> Iterator[Measured]:
        baseline = self.process.status_kib("VmRSS")
        started = time.monotonic()
        with RssSampler(self.process) as rss:
            yield self
        self.figures.update(
            rss_before_mib=round(baseline / 1024, 1),
            rss_peak_mib=round(rss.peak_kib / 1024, 1),
            growth_mib=round((rss.peak_kib - baseline) / 1024, 1),
            seconds=round(time.monotonic() - started, 2),
        )
        record_result(f"memory_{self.key}", self.figures)

    def assert_bounded(self) -> None:
        assert self.figures["growth_mib"] < GROWTH_BOUND_MIB, self.figures


def measure(p: PrivateProxy, key: str) -> contextlib.AbstractContextManager[Measured]:
    return Measured(p.process, key).run()


def plain(p: PrivateProxy) -> socket.socket:
    return socket.create_connection((p.view.proxy_host, p.view.proxy_port), timeout=TIMEOUT)


def h2_tunnel(p: PrivateProxy, authority: str) -> contextlib.AbstractContextManager:
    return p.view.tunnel(authority, alpn=["h2"])


def send_until_answered(sock: socket.socket, prefix: bytes, unit: bytes, size: int) -> int:
    """Send `prefix`, then `unit` repeated up to `size` bytes, until the proxy answers or
    closes; returns the bytes sent. Reading is left to the caller."""
    sock.sendall(prefix)
    sent, step = len(prefix), unit * max(1, MIB // len(unit))
    try:
        while sent < size and not select.select([sock], [], [], 0)[0]:
            sock.sendall(step)
            sent += len(step)
    except OSError:
        pass
    return sent


def read_answer(sock: socket.socket) -> tuple[int | None, dict[str, str], bytes]:
    try:
        status, headers, rest = read_head(sock)
    except (OSError, ConnectionError):
        return None, {}, b""
    with contextlib.suppress(OSError):
        while len(rest) < int(headers.get("content-length", "0")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest


def h2_request(authority: str, method: str, path: str, *extra: tuple[str, str]) -> list:
    return [(":method", method), (":scheme", "https"), (":authority", authority),
            (":path", path), *extra]  # fmt: skip
