"""Starts mitmproxy with the egress addon: CA, upstream trust, options, metrics, reload.

This is the one module of `proxy/` that imports mitmproxy; the policy core does not.

Invariants:
* Nothing listens before the configuration, the CA and the upstream trust have
  been loaded; any of them failing ends the process with a message and exit 2.
* Upstream certificates are always verified (`ssl_insecure` stays off); an
  `--upstream-ca` is added to the public roots, never replaces them.
* Upstream connections are opened only after the policy ran (`connection_strategy=lazy`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import certifi
from cryptography import x509

from proxy import config as configuration
from proxy import workers
from proxy.audit import AuditLog, BackgroundAuditLog
from proxy.ca import KeyType, ensure_ca
from proxy.metrics import MetricsServer, ProxyMetrics
from proxy.policy import Policy
from proxy.resolver import CachingResolver, system_resolve
from proxy.selfaddr import SelfAddressError, SelfAddresses

log = logging.getLogger("egress")

UPSTREAM_TRUST = "upstream-trust.pem"


class LaunchError(Exception):
    """The proxy cannot start; the message says why (never with a secret)."""


@dataclass(frozen=True)
class Settings:
    config_path: str
    mode: str
    listen: tuple[str, int]
    metrics: tuple[str, int]
    certs: Path
    audit_log: str
    upstream_ca: Path | None
    dns_cache_seconds: float = 5.0
    worker: int | None = None  # set in a worker of `--workers N`: the parent serves metrics
    ca_key_type: KeyType = KeyType.ECDSA  # for a CA created at start (an existing one is kept)


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def upstream_trust(certs: Path, extra_ca: Path) -> Path:
    """The public roots plus the operator's CA, as one bundle mitmproxy verifies against."""
    try:
        pem = extra_ca.read_bytes()
        if not x509.load_pem_x509_certificates(pem):
            raise ValueError("no certificate")
    except (OSError, ValueError) as exc:
        raise LaunchError(
            f"--upstream-ca {extra_ca}: not a readable PEM certificate ({exc})"
        ) from exc
    bundle = certs / UPSTREAM_TRUST
    bundle.write_bytes(Path(certifi.where()).read_bytes().rstrip(b"\n") + b"\n" + pem)
    return bundle


def self_addresses(settings: Settings) -> SelfAddresses:
    """The endpoints to refuse; a name given to --listen/--metrics is resolved now."""
    try:
        return SelfAddresses([settings.listen, settings.metrics])
    except SelfAddressError as exc:
        raise LaunchError(f"--listen/--metrics: {exc}") from exc


async def serve(settings: Settings) -> int:
    from mitmproxy.addons.termlog import TermLog
    from mitmproxy.options import Options
    from mitmproxy.tools.dump import DumpMaster

    from addons.egress import EgressPolicy

    network = configuration.load(settings.config_path)  # ConfigError propagates to the CLI
    own = self_addresses(settings)  # resolved once: a reload keeps what the proxy bound
    ca_cert = ensure_ca(settings.certs, settings.ca_key_type).cert
    trust = upstream_trust(settings.certs, settings.upstream_ca) if settings.upstream_ca else None
    metrics = ProxyMetrics()
    metrics.allowlist_entries.set(len(network.allowlist))
    # A worker's metrics reach the parent of `--workers N` through files; it serves none.
    metrics_server = None if settings.worker is not None else _metrics_server(settings, metrics)
    ready = metrics_server.ready if metrics_server else threading.Event()
    # Written by a thread of its own: the event loop only enqueues (bounded, drops counted).
    audit = BackgroundAuditLog(AuditLog.open(settings.audit_log), metrics.audit_dropped.inc)

    options = Options()
    master = DumpMaster(options, with_termlog=False, with_dumper=False)
    # mitmproxy logs to stdout by default, where `--audit-log -` writes its JSON lines:
    # operator messages (a refused reload, an addon error) go to stderr instead.
    master.addons.add(TermLog(out=sys.stderr))
    options.update(  # after DumpMaster: its addons declare most of these options
        mode=[settings.mode],
        listen_host=settings.listen[0],
        listen_port=settings.listen[1],
        confdir=str(settings.certs),
        connection_strategy="lazy",
        termlog_verbosity="warn",
        ssl_verify_upstream_trusted_ca=str(trust) if trust else None,
    )

    def on_running() -> None:
        ready.set()
        if settings.worker is not None:
            workers.worker_ready(settings.worker)
            if settings.worker > 0:
                return  # one banner is enough
        print(banner(settings, ca_cert, len(network.allowlist)), file=sys.stderr, flush=True)

    resolver = system_resolve
    if settings.dns_cache_seconds > 0:
        resolver = CachingResolver(system_resolve, max_age=settings.dns_cache_seconds)
    policy = Policy(network, own, own.is_local)
    addon = EgressPolicy(policy, metrics, audit, on_running, resolver=resolver)
    master.addons.add(addon)

    def reload() -> None:
        try:
            fresh = configuration.load(settings.config_path)
        except configuration.ConfigError as exc:
            metrics.config_reloads.labels("failed").inc()
            for problem in exc.problems:
                log.error("reload refused, keeping the running configuration: %s", problem)
            return
        addon.policy = Policy(fresh, own, own.is_local)  # one assignment: atomic
        metrics.allowlist_entries.set(len(fresh.allowlist))
        metrics.config_reloads.labels("ok").inc()
        log.warning("configuration reloaded: %d allowlist entries", len(fresh.allowlist))

    if settings.worker is not None:
        workers.share_listen_port()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reload)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    if metrics_server is not None:
        metrics_server.start()
    try:
        await master.run()
    finally:
        audit.close()
        if metrics_server is not None:
            metrics_server.stop()
    return 0 if ready.is_set() else 1


def _metrics_server(settings: Settings, metrics: ProxyMetrics) -> MetricsServer:
    try:
        return MetricsServer(settings.metrics, metrics.registry)
    except OSError as exc:
        host, port = settings.metrics
        raise LaunchError(f"cannot listen for metrics on {host}:{port}: {exc.strerror}") from exc


def banner(settings: Settings, ca_cert: Path, entries: int) -> str:
    listen = f"{settings.listen[0]}:{settings.listen[1]}"
    metrics = f"{settings.metrics[0]}:{settings.metrics[1]}"
    return (
        f"egress-proxy: {settings.mode} proxy listening on {listen}\n"
        f"egress-proxy: metrics on http://{metrics}/metrics (health: /healthz)\n"
        f"egress-proxy: CA certificate for sandboxes to trust: {ca_cert.resolve()}\n"
        f"egress-proxy: {entries} allowlist entries from {settings.config_path}"
    )
