"""What `serve` (runtime/launcher.py) prepares before anything listens: the settings, the
addresses, the port probe, the upstream trust bundle, the metrics listener, the resolver,
the banner.

A launcher module: nothing here imports mitmproxy, so each failure is found, and said in
the project's words (`LaunchError`, one line), before mitmproxy's seconds of importing.

Invariants:
* Upstream certificates are always verified: an `--upstream-ca` is added to the public
  roots (`upstream_trust`), never replaces them.
* A `LaunchError` message never carries a secret; the command line prints it and exits 2.
"""

from __future__ import annotations

import resource
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import certifi
from cryptography import x509

from sandbox_egress.common.endpoint import format_endpoint, parse_endpoint
from sandbox_egress.common.serve import MetricsServer
from sandbox_egress.proxy.fairness import Bound, Fairness, Slots
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.resolver import (
    CachingResolver,
    FairResolver,
    MeasuredResolver,
    Resolve,
    threaded_resolve,
)
from sandbox_egress.proxy.selfaddr import SelfAddressError, SelfAddresses
from sandbox_egress.runtime import lifecycle, optimized
from sandbox_egress.runtime.ca import KeyType

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
    fairness: Fairness = Fairness()  # the fair-share bounds (docs/configuration.md)
    worker: int | None = None  # set in a worker of `--workers N`: the parent serves metrics
    ca_key_type: KeyType = KeyType.ECDSA  # for a CA created at start (an existing one is kept)
    drain_seconds: float = 10.0  # SIGTERM: how long transfers in flight may still run
    watch_interval: float = lifecycle.WATCH_INTERVAL_S  # 0: reload on SIGHUP only
    engine: str = "lean"  # or "mitmdump": mitmproxy's full addon chain, for comparison
    # rows of runtime/engine/patches.py turned on (issue 49: `body_relay`, D560;
    # `fast_path`, D610), each a `run` flag
    switches: frozenset[str] = frozenset()
    log_format: str = "text"  # or "json": operator messages on stderr as JSON lines
    http2: bool = True  # False: HTTP/1.1 only with clients, and so upstream (D76)
    audit_format: str = "jsonl"  # or "ocsf": OCSF 1.x events (proxy.ocsf, issue 34)
    otlp_endpoint: str | None = None  # OTLP/HTTP log export of the audit (runtime.otlp)
    otlp_headers: tuple[tuple[str, str], ...] = ()  # --otlp-header, unresolved (D402)
    upstream_connect_s: float = 30.0  # issues 43, 48: a connect not made this long fails
    upstream_answer_s: float = 300.0  # ... an answer not begun this long after the request
    admin_token: str | None = field(default=None, repr=False)  # --admin-token-file's (issue 47)


def parse_hostport(text: str) -> tuple[str, int]:
    """`--listen`/`--metrics`: an empty host listens on every IPv4 interface."""
    return parse_endpoint(text, empty_host="0.0.0.0")


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
    content = Path(certifi.where()).read_bytes().rstrip(b"\n") + b"\n" + pem
    try:
        bundle = certs / UPSTREAM_TRUST
        bundle.write_bytes(content)
    except OSError:  # a read-only CA directory (a mounted Secret): a private one instead
        bundle = Path(tempfile.mkdtemp(prefix="egress-trust-")) / UPSTREAM_TRUST
        bundle.write_bytes(content)
    return bundle


def refuse_a_taken_port(listen: tuple[str, int]) -> None:
    """Fail now, in our words, when the proxy port is taken (mitmproxy says so only later).

    Binds and closes a socket with the options the server uses (SO_REUSEADDR), so a port in
    TIME_WAIT is not refused. Workers share the port (SO_REUSEPORT) and skip this.
    """
    host, port = listen
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LaunchError(
            f"cannot listen on {format_endpoint(host, port)}: {reason}; choose another "
            "address with --listen HOST:PORT (make run LISTEN=HOST:PORT)"
        ) from exc


def self_addresses(settings: Settings) -> SelfAddresses:
    """The endpoints to refuse; a name given to --listen/--metrics is resolved now."""
    try:
        return SelfAddresses([settings.listen, settings.metrics])
    except SelfAddressError as exc:
        raise LaunchError(f"--listen/--metrics: {exc}") from exc


def listen_for_metrics(settings: Settings, metrics: ProxyMetrics) -> MetricsServer:
    """The /metrics and /healthz listener, bound now (it starts serving later)."""
    try:
        return MetricsServer(
            settings.metrics,
            metrics.registry,
            max_connections=settings.fairness.metrics_connections,
            on_refused=metrics.bound_hits.labels(Bound.METRICS_CONNECTIONS.value, "refused").inc,
        )
    except OSError as exc:
        shown = format_endpoint(*settings.metrics)
        raise LaunchError(f"cannot listen for metrics on {shown}: {exc.strerror}") from exc


def descriptor_limit() -> int:
    """The process's soft limit on open descriptors (RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def fair_resolver(
    settings: Settings, metrics: ProxyMetrics, on_lookup: Callable[[str, float], None]
) -> FairResolver:
    """The system resolver on threads of its own, shared fairly between clients, behind
    the answer cache (whose failures are kept as long as its answers)."""
    share = settings.fairness.dns

    def hit(outcome: str) -> Callable[[Bound], None]:
        return lambda bound: metrics.bound_hits.labels(bound.value, outcome).inc()

    resolve: Resolve = MeasuredResolver(threaded_resolve(share.total), on_lookup)
    cache = None
    if settings.dns_cache_seconds > 0:
        age = settings.dns_cache_seconds
        cache = CachingResolver(resolve, max_age=age, negative_age=age)
        resolve = cache
    slots = Slots(share, Bound.DNS_CLIENT, Bound.DNS_TOTAL, hit("waited"))
    return FairResolver(resolve, slots, cache, hit("refused"))


def banner(settings: Settings, ca_cert: Path, entries: int) -> str:
    listen = f"{settings.listen[0]}:{settings.listen[1]}"
    metrics = f"{settings.metrics[0]}:{settings.metrics[1]}"
    return (
        f"egress-proxy: {settings.mode} proxy listening on {listen}\n"
        f"egress-proxy: metrics on http://{metrics}/metrics (health: /healthz)\n"
        f"egress-proxy: CA certificate for sandboxes to trust: {ca_cert.resolve()}\n"
        f"egress-proxy: {entries} allowlist entries from {settings.config_path}\n"
        f"egress-proxy: {optimized.describe()}"
    )
