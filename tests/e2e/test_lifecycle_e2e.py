"""End to end, the proxy's life as an operator drives it (issue 14; runtime/lifecycle.py):
reload when the file changes (an editor's rename, a Kubernetes ConfigMap's `..data`
swap), the reload gauges, and SIGTERM draining: /healthz 503 at once, no new
connection, transfers in flight finish within the grace period, then exit 0.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed import procs
from testbed.proxyproc import Samples, reload_counts
from testbed.streaming import expected_sha256, read_head, receive_body
from tests.e2e.conftest import BULK_TLS_PORT, Bulk, PrivateProxy
from tests.e2e.test_hardening_e2e import INVALID, RELOAD_V1, RELOAD_V2

pytestmark = pytest.mark.netns

WATCH = ("--watch-interval", "0.2")


def status(p: PrivateProxy, host: str) -> tuple[int, str | None]:
    response = p.view.plain(f"http://{host}/lifecycle")
    return response.status, response.header("X-Egress-Denied")


def gauge(samples: Samples, name: str) -> float:
    return samples[(name, ())]


def wait_for_counts(p: PrivateProxy, expected: dict[str, float]) -> Samples:
    def reached() -> bool:
        return reload_counts(p.process.scrape()) == expected

    procs.wait_until(f"reload counts {expected}", reached, timeout=15, child=p.process.child)
    return p.process.scrape()


def replace(path: Path, text: str) -> None:
    """What editors and config management do: write beside, then rename over."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def test_a_changed_file_is_reloaded_without_a_signal(
    private_proxy: Callable[..., PrivateProxy],
) -> None:
    p = private_proxy("watch", RELOAD_V1, *WATCH)
    started = gauge(p.process.scrape(), "egress_config_last_reload_success_timestamp_seconds")
    assert gauge(p.process.scrape(), "egress_config_last_reload_successful") == 1
    assert status(p, "plain.allowed.test") == (403, "not_allowlisted")

    replace(p.process.config, RELOAD_V2)
    samples = wait_for_counts(p, {"ok": 1.0, "failed": 0.0})

    assert status(p, "plain.allowed.test") == (200, None)
    assert status(p, "api.allowed.test") == (403, "not_allowlisted")
    assert gauge(samples, "egress_config_last_reload_successful") == 1
    assert gauge(samples, "egress_config_last_reload_success_timestamp_seconds") >= started
    assert "configuration reloaded (file change)" in p.process.child.stderr.read_text()


def test_an_invalid_change_keeps_the_running_configuration(
    private_proxy: Callable[..., PrivateProxy],
) -> None:
    p = private_proxy("watch-bad", RELOAD_V1, *WATCH)
    before = gauge(p.process.scrape(), "egress_config_last_reload_success_timestamp_seconds")

    replace(p.process.config, INVALID["loopback-entry"])
    samples = wait_for_counts(p, {"ok": 0.0, "failed": 1.0})

    assert gauge(samples, "egress_config_last_reload_successful") == 0
    assert gauge(samples, "egress_config_last_reload_success_timestamp_seconds") == before
    assert status(p, "other.allowed.test") == (200, None)  # the old configuration serves
    assert status(p, "plain.allowed.test") == (403, "not_allowlisted")

    replace(p.process.config, RELOAD_V2)
    samples = wait_for_counts(p, {"ok": 1.0, "failed": 1.0})
    assert gauge(samples, "egress_config_last_reload_successful") == 1
    assert status(p, "plain.allowed.test") == (200, None)


def test_a_kubernetes_configmap_swap_is_reloaded(
    private_proxy: Callable[..., PrivateProxy],
) -> None:
    """A mounted ConfigMap: `config.yaml -> ..data/config.yaml`, `..data -> ..<version>`;
    an update writes a new version directory and renames a new `..data` link over it."""
    p = private_proxy("configmap", RELOAD_V1, *WATCH)
    mount = p.process.config.parent / f"{p.process.config.stem}-mount"
    (mount / "..v1").mkdir(parents=True)
    (mount / "..v1" / "config.yaml").write_text(RELOAD_V1)
    (mount / "..data").symlink_to("..v1")
    (mount / "config.yaml").symlink_to("..data/config.yaml")
    link = p.process.config.with_name(p.process.config.name + ".link")
    link.symlink_to(mount / "config.yaml")
    os.replace(link, p.process.config)  # the proxy's file is now the mounted one (same text)
    wait_for_counts(p, {"ok": 1.0, "failed": 0.0})
    assert status(p, "plain.allowed.test") == (403, "not_allowlisted")

    (mount / "..v2").mkdir()
    (mount / "..v2" / "config.yaml").write_text(RELOAD_V2)
    (mount / "..data_tmp").symlink_to("..v2")
    os.replace(mount / "..data_tmp", mount / "..data")  # kubelet's atomic swap

    wait_for_counts(p, {"ok": 2.0, "failed": 0.0})
    assert status(p, "plain.allowed.test") == (200, None)


def connect_refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_drains_transfers_in_flight_then_exits(
    private_proxy: Callable[..., PrivateProxy], bulk: Bulk
) -> None:
    p, size = private_proxy("drain", RELOAD_V1, "--drain-seconds", "30"), 64 * 1024 * 1024
    host = f"api.allowed.test:{BULK_TLS_PORT}"
    with p.view.tunnel(host) as conn:
        conn.sock.settimeout(30)
        conn.send(f"GET /download?size={size} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        code, headers, rest = read_head(conn.sock)
        first = receive_body(conn.sock, rest, 1024 * 1024)  # then stop reading for a while
        assert code == 200

        os.kill(p.process.pid, signal.SIGTERM)
        procs.wait_until("/healthz 503", lambda: p.process.healthz() == 503, timeout=10)
        procs.wait_until(
            "listener closed",
            lambda: connect_refused(p.view.proxy_host, p.view.proxy_port),
            timeout=10,
        )
        assert p.process.child.alive()  # still serving the download

        body = receive_body(conn.sock, b"", size - first.count)
    assert first.count + body.count == size
    procs.wait_until("proxy exited", lambda: not p.process.child.alive(), timeout=15)
    assert p.process.child.popen.returncode == 0


def test_sigterm_stops_at_the_end_of_the_grace_period(
    private_proxy: Callable[..., PrivateProxy], bulk: Bulk
) -> None:
    p, size = private_proxy("drain-short", RELOAD_V1, "--drain-seconds", "1"), 64 * 1024 * 1024
    host = f"api.allowed.test:{BULK_TLS_PORT}"
    with p.view.tunnel(host) as conn:
        conn.sock.settimeout(30)
        conn.send(f"GET /download?size={size} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        read_head(conn.sock)
        os.kill(p.process.pid, signal.SIGTERM)
        signalled = time.monotonic()
        procs.wait_until("proxy exited", lambda: not p.process.child.alive(), timeout=15)
        assert time.monotonic() - signalled < 10  # the grace, not the transfer, decided
        body = receive_body(conn.sock, b"", size)
    assert body.count < size  # cut: the client sees a short body, never a silent hang
    assert p.process.child.popen.returncode == 0
    assert body.sha256 != expected_sha256(size)
