"""What `serve` prepares before anything listens (runtime/startup.py), called in-process:
each failure is a `LaunchError` in the project's words (the console script's lines are
tests/proxy/test_startup_errors.py)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import certifi
import pytest

from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.runtime import optimized
from sandbox_egress.runtime.startup import (
    UPSTREAM_TRUST,
    LaunchError,
    Settings,
    banner,
    listen_for_metrics,
    parse_hostport,
    refuse_a_taken_port,
    upstream_trust,
)
from testbed.testca import make_test_pki


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


SETTINGS = Settings(
    config_path="env.yaml",
    mode="regular",
    listen=("127.0.0.1", 8080),
    metrics=("127.0.0.1", 9464),
    certs=Path("certs"),
    audit_log="-",
    upstream_ca=None,
)


def ca_cert(directory: Path) -> Path:
    directory.mkdir()
    return make_test_pki(directory, ["internal.test"], []).ca_cert


def test_the_upstream_trust_is_the_public_roots_then_the_operators_ca(tmp_path: Path) -> None:
    ca = ca_cert(tmp_path / "pki")
    bundle = upstream_trust(tmp_path, ca)
    assert bundle == tmp_path / UPSTREAM_TRUST
    roots = Path(certifi.where()).read_bytes().rstrip(b"\n")
    assert bundle.read_bytes() == roots + b"\n" + ca.read_bytes()


def test_a_ca_directory_that_cannot_be_written_gets_a_private_bundle(tmp_path: Path) -> None:
    ca = ca_cert(tmp_path / "pki")
    not_a_directory = tmp_path / "certs"
    not_a_directory.write_text("")
    bundle = upstream_trust(not_a_directory, ca)
    try:
        assert bundle.name == UPSTREAM_TRUST
        assert bundle.parent.name.startswith("egress-trust-")
        assert bundle.read_bytes().endswith(ca.read_bytes())
    finally:
        shutil.rmtree(bundle.parent)


def test_an_upstream_ca_without_a_certificate_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "ca.pem"
    text.write_text("not a certificate\n")
    with pytest.raises(LaunchError, match=r"^--upstream-ca .*ca\.pem: not a readable PEM"):
        upstream_trust(tmp_path, text)
    assert not (tmp_path / UPSTREAM_TRUST).exists()


def test_a_taken_proxy_port_names_listen(taken: int) -> None:
    with pytest.raises(LaunchError) as refused:
        refuse_a_taken_port(("127.0.0.1", taken))
    assert str(refused.value) == (
        f"cannot listen on 127.0.0.1:{taken}: Address already in use; choose another "
        "address with --listen HOST:PORT (make run LISTEN=HOST:PORT)"
    )


def test_a_free_proxy_port_passes_the_probe() -> None:
    refuse_a_taken_port(("127.0.0.1", 0))


def test_a_taken_metrics_port_is_one_line(taken: int) -> None:
    with pytest.raises(LaunchError) as refused:
        listen_for_metrics(replace(SETTINGS, metrics=("127.0.0.1", taken)), ProxyMetrics())
    assert str(refused.value) == (
        f"cannot listen for metrics on 127.0.0.1:{taken}: Address already in use"
    )


def test_an_empty_host_listens_on_every_ipv4_interface() -> None:
    assert parse_hostport(":8080") == ("0.0.0.0", 8080)


def test_the_banner_names_the_addresses_the_ca_and_the_allowlist(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    assert banner(SETTINGS, ca, 3).splitlines() == [
        "egress-proxy: regular proxy listening on 127.0.0.1:8080",
        "egress-proxy: metrics on http://127.0.0.1:9464/metrics (health: /healthz)",
        f"egress-proxy: CA certificate for sandboxes to trust: {ca}",
        "egress-proxy: 3 allowlist entries from env.yaml",
        f"egress-proxy: {optimized.describe()}",
    ]
