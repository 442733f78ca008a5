"""Starts mitmproxy with the egress addon: CA, upstream trust, options, metrics, reload.

A launcher module: it imports mitmproxy and `addons/`; the policy core imports neither
(tests/proxy/test_layers.py).

What must succeed before anything listens is prepared by `runtime.startup`.

Invariants:
* Nothing listens before the configuration, the CA and the upstream trust have
  been loaded; any of them failing ends the process with a message and exit 2.
* Upstream certificates are always verified (`ssl_insecure` stays off).
* Upstream connections are opened only after the policy ran (`connection_strategy=lazy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.common.logs import MaskedValues, announce, formatter
from sandbox_egress.proxy import limits
from sandbox_egress.proxy.audit import AUDIT_FORMATS
from sandbox_egress.proxy.audit.log import BackgroundAuditLog
from sandbox_egress.proxy.clauses.budget import series as budget_series
from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.proxy.credentials.cache import Credentials
from sandbox_egress.proxy.credentials.fleet import Fleet
from sandbox_egress.proxy.credentials.https import Https
from sandbox_egress.proxy.credentials.section import sources as credential_sources
from sandbox_egress.proxy.fairness import Bound, within_descriptors
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.state.backends import open_state
from sandbox_egress.proxy.state.memory import MemoryState
from sandbox_egress.proxy.tenancy import sandboxes
from sandbox_egress.proxy.tenancy.tenants import Tenancy
from sandbox_egress.runtime import lifecycle, trim
from sandbox_egress.runtime.admin import api as admin
from sandbox_egress.runtime.ca import ensure_ca
from sandbox_egress.runtime.engine import patches
from sandbox_egress.runtime.engine.patches import Stage
from sandbox_egress.runtime.fleet import workers
from sandbox_egress.runtime.fleet.tenants import Tenants
from sandbox_egress.runtime.otlp import TIMEOUT_S as OTLP_TIMEOUT_S
from sandbox_egress.runtime.otlp import OtlpExporter, TeeAudit
from sandbox_egress.runtime.startup import (
    Settings,
    banner,
    descriptor_limit,
    fair_resolver,
    listen_for_metrics,
    refuse_a_taken_port,
    self_addresses,
    upstream_trust,
)
from sandbox_egress.runtime.status import StatusBoard

if TYPE_CHECKING:
    from sandbox_egress.addons.egress import EgressPolicy

log = logging.getLogger("egress")


class Addons(Protocol):
    """What `serve` calls of mitmproxy's AddonManager, typed (mitmproxy's methods are not)."""

    def add(self, *addons: object) -> None: ...

    def get(self, name: str) -> Any: ...  # the addon named `name`, or None


class Engine(Protocol):
    """What `serve` calls of a mitmproxy Master (the lean one or mitmdump's), typed."""

    @property
    def addons(self) -> Addons: ...

    def shutdown(self) -> None: ...

    async def run(self) -> None: ...


class EngineOptions(Protocol):
    """What `serve` calls of mitmproxy's Options, typed."""

    def update(self, **kwargs: object) -> None: ...


def _require_secrets(network: configuration.NetworkConfig) -> None:
    """The proxy injects: a configuration loaded with `secrets=False` is a bug here (D83)."""
    if not network.secrets_resolved:
        raise InvariantError("the proxy was given a configuration without its secrets")


async def serve(settings: Settings) -> int:
    # What can fail is checked before mitmproxy is imported (seconds on a busy machine).
    network = configuration.load(settings.config_path)  # ConfigError propagates to the CLI
    section = sandboxes.node_section(settings.config_path)  # a node proxy's sandboxes (1.12)
    own = self_addresses(settings)  # resolved once: a reload keeps what the proxy bound
    if settings.worker is None:
        refuse_a_taken_port(settings.listen)

    # mitmproxy's addons one by one, no QUIC, seldom used libraries on first use (D162,
    # D297, D298): before anything imports mitmproxy (runtime/engine/patches.py).
    patches.install(Stage.IMPORT, settings.engine)
    from mitmproxy.addons.termlog import TermLog

    from sandbox_egress.addons.connections import Connections
    from sandbox_egress.addons.egress import EgressPolicy
    from sandbox_egress.addons.layers.limits import Limits
    from sandbox_egress.addons.telemetry import CountingAudit, Telemetry
    from sandbox_egress.addons.upstream import UpstreamFailures

    ca = ensure_ca(settings.certs, settings.ca_key_type)
    ca_cert = ca.cert
    if ca.created and settings.worker in (None, 0):  # a relative --certs elsewhere: a new CA
        announce(
            settings.log_format,
            sys.stderr,
            "egress-proxy",
            "egress",
            f"created a new CA in {settings.certs.resolve()}: sandboxes must trust its "
            "certificate (--certs is relative to the working directory)",
        )
    trust = upstream_trust(settings.certs, settings.upstream_ca) if settings.upstream_ca else None
    metrics = ProxyMetrics()
    # Over TCP no HTTP/3 name (D305); out of descriptors, accepting pauses (D97).
    on_pause = metrics.bound_hits.labels(Bound.ACCEPT.value, "refused").inc
    patches.install(Stage.PROCESS, settings.engine, {"on_pause": on_pause})
    metrics.allowlist_entries.set(len(network.allowlist))
    # A worker's metrics reach the parent of `--workers N` through files; it serves none.
    metrics_server = None if settings.worker is not None else listen_for_metrics(settings, metrics)
    ready = metrics_server.ready if metrics_server else threading.Event()
    # Written by a thread of its own: the event loop only enqueues (bounded, drops counted).
    audit = BackgroundAuditLog(
        AUDIT_FORMATS[settings.audit_format].open(settings.audit_log, settings.worker),
        metrics.audit_dropped.inc,
    )

    options, master = _engine(settings.engine, settings.switches)
    # mitmproxy logs to stdout by default, where `--audit-log -` writes its JSON lines:
    # operator messages (a refused reload, an addon error) go to stderr instead.
    termlog = TermLog(out=sys.stderr)
    # mitmproxy's own lines read like ours: `egress-proxy: message`, or the same JSON fields.
    termlog.logger.setFormatter(formatter(settings.log_format, "egress-proxy"))
    master.addons.add(termlog)
    options.update(  # after the master: its addons declare most of these options
        mode=[settings.mode],
        listen_host=settings.listen[0],
        listen_port=settings.listen[1],
        confdir=str(settings.certs),
        connection_strategy="lazy",
        termlog_verbosity="warn",
        ssl_verify_upstream_trusted_ca=str(trust) if trust else None,
        # A backstop: whatever no addon streams is streamed past this size, never held.
        # `body_size_limit` stays unset: mitmproxy applies it to an announced
        # Content-Length before any addon runs, streamed or not (D27).
        stream_large_bodies=limits.STREAM_BODIES_OVER,
        http2=settings.http2,
    )

    def on_running() -> None:
        # The banner first: whoever waited for /healthz (or the worker's ready) reads it.
        if settings.worker in (None, 0):  # one banner is enough
            for line in banner(settings, ca_cert, len(network.allowlist)).splitlines():
                message = line.removeprefix("egress-proxy: ")
                announce(settings.log_format, sys.stderr, "egress-proxy", "egress", message)
        ready.set()
        if settings.worker is not None:
            workers.worker_ready(settings.worker)

    def on_lookup(result: str, seconds: float) -> None:
        metrics.dns_lookups.labels(result).inc()
        metrics.dns_lookup_seconds.observe(seconds)

    resolver = fair_resolver(settings, metrics, on_lookup)
    _require_secrets(network)
    policy = Policy(network, own, own.is_local)
    otlp = None  # --otlp-endpoint: every record also to a collector, batched (issue 34)
    if settings.otlp_endpoint:
        dropped = metrics.audit_sink_dropped.labels("otlp").inc
        otlp = OtlpExporter(
            settings.otlp_endpoint, dropped, settings.worker, headers=settings.otlp_headers
        )
    counted = CountingAudit(audit if otlp is None else TeeAudit(audit, otlp), metrics)
    addon = EgressPolicy(policy, metrics, counted, on_running, resolver=resolver)
    addon.shared.state = open_state(network.state, metrics.state_unavailable_inc)  # issue 34
    kept = isinstance(addon.shared.state, MemoryState)  # the gauge shows what is held (D400)
    metrics.budgets_configured(budget_series(network.allowlist), kept)
    # Every operator line, the engine's too, with a value a sandbox sent masked (D363).
    masking = MaskedValues(addon.shared.masked)
    for handler in (termlog.logger, *logging.getLogger("egress").handlers):
        handler.addFilter(masking)
    connections = within_descriptors(settings.fairness.connections, descriptor_limit())
    master.addons.add(  # UpstreamFailures before the policy addon, whose `error` hook audits
        Connections(metrics, connections),
        Limits(metrics),
        UpstreamFailures(metrics, settings.upstream_connect_s, settings.upstream_answer_s),
        addon,
        Telemetry(metrics),
    )
    tenants = _tenants(section, policy, addon, metrics)
    https = Https(str(settings.upstream_ca) if settings.upstream_ca else None)  # issue 32

    def on_fetch(name: str, outcome: str) -> None:
        metrics.credential_fetches.labels(name, outcome).inc()
        if outcome != "ok":  # the source's words: a path, a status, an exit; never a value
            log.warning("credential %s: fetch %s: %s", name, outcome, credentials.problem(name))

    fleet = None  # a shared state: one replica at a time refreshes a rotating token (D232)
    if not isinstance(addon.shared.state, MemoryState):
        fleet = Fleet(addon.shared.state, asyncio.get_running_loop())

    def on_stale(name: str, first: bool) -> None:  # D403: while max_stale serves it
        metrics.credential_stale.labels(name).inc()
        if first:
            log.warning(
                "credential %s: serving its last value stale (max_stale): the refresh failed: %s",
                name,
                credentials.problem(name),
            )

    credentials = Credentials(
        *credential_sources(network.credentials, https, fleet),
        on_fetch=on_fetch,
        on_stale=on_stale,
    )
    addon.shared.credentials = credentials
    board = StatusBoard(  # /status
        settings.config_path,
        addon.shared.state,
        _loaded(tenants),
        refused=None if tenants is None else tenants.directory.refused,
        engine=settings.engine,
    )

    def apply(fresh: configuration.NetworkConfig) -> None:
        _require_secrets(fresh)
        addon.policy = Policy(fresh, own, own.is_local)  # one assignment: atomic
        addon.shared.credentials.replace(*credential_sources(fresh.credentials, https, fleet))
        if fresh.state != network.state:  # the store stays: what was spent stays spent (D217)
            log.warning("reload: the state: section changed; it takes effect at the next start")
        if tenants is not None:
            tenants.node_changed(addon.policy)
        metrics.allowlist_entries.set(len(fresh.allowlist))
        metrics.budgets_configured(budget_series(fresh.allowlist), kept)
        board.reloaded()
        gc.freeze()  # the new policy's objects join the frozen start-up heap (D143)

    def on_result(ok: bool) -> None:
        metrics.config_reloads.labels("ok" if ok else "failed").inc()
        metrics.reload_successful.set(1 if ok else 0)
        if ok:
            metrics.reload_success_time.set(time.time())

    reload = lifecycle.Reloader(settings.config_path, apply, on_result, network.secret_files)
    metrics.reload_successful.set(1)  # the load at start
    metrics.reload_success_time.set(time.time())
    if settings.worker is not None:
        workers.share_listen_port()
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    if otlp is not None:
        tasks.append(loop.create_task(otlp.run(), name="otlp"))
    tasks.append(loop.create_task(admin.wire(addon, settings, metrics_server), name="approvals"))

    def on_sigterm() -> None:
        if any(task.get_name() == "drain" for task in tasks):
            master.shutdown()  # a second SIGTERM: stop now
            return
        if metrics_server is not None:
            metrics_server.draining.set()
        proxyserver = master.addons.get("proxyserver")
        in_flight = len(proxyserver.connections) if proxyserver else 0
        say(
            f"SIGTERM: draining, new connections refused; {in_flight} open connections "
            f"get up to {settings.drain_seconds:g} s"
        )
        drained = lifecycle.drain(
            stop_listening=lambda: options.update(server=False),
            open_connections=lambda: len(proxyserver.connections) if proxyserver else 0,
            shutdown=master.shutdown,
            grace=settings.drain_seconds,
        )
        tasks.append(loop.create_task(drained, name="drain"))

    def say(message: str) -> None:
        announce(settings.log_format, sys.stderr, "egress-proxy", "egress", message)

    loop.add_signal_handler(signal.SIGHUP, _on_sighup(reload, tenants))
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    loop.add_signal_handler(signal.SIGINT, master.shutdown)
    if settings.watch_interval > 0:
        watch = lifecycle.watch_file(reload, settings.watch_interval)
        tasks.append(loop.create_task(watch, name="watch"))
        if tenants is not None:
            watched = tenants.watch(settings.watch_interval)
            tasks.append(loop.create_task(watched, name="watch-sandboxes"))
    proxyserver = master.addons.get("proxyserver")
    if proxyserver is not None:
        server_addon = proxyserver

        def activity() -> frozenset[object]:
            return frozenset(server_addon.connections)  # the open connections' ids

        release = trim.releaser(trim.malloc_trim())
        tasks.append(loop.create_task(trim.trim_when_quiet(activity, release), name="trim"))
    if metrics_server is not None:
        server = metrics_server

        def stamp(now: float) -> None:
            server.heartbeat = now

        tasks.append(loop.create_task(lifecycle.heartbeat(stamp), name="heartbeat"))
        tasks.append(loop.create_task(board.watch(), name="status"))
        metrics_server.status = board.document
        metrics_server.start()
    try:
        await master.run()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        audit.close()
        if otlp is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(otlp.flush(), OTLP_TIMEOUT_S)  # what is queued, bounded
        await addon.shared.state.close()
        if metrics_server is not None:
            metrics_server.stop()
        if settings.worker is None or settings.worker == 0:
            say("stopped")
    return 0 if ready.is_set() else 1


def _tenants(
    section: sandboxes.SandboxesSection | None,
    policy: Policy,
    addon: EgressPolicy,
    metrics: ProxyMetrics,
) -> Tenants | None:
    """With `sandboxes:`, the directory loaded and its snapshot installed before listening
    (with no valid sandbox file, every client is refused `unknown_sandbox`)."""
    if section is None:
        return None

    def install(tenancy: Tenancy) -> None:
        addon.shared.tenancy = tenancy  # one assignment (D24)

    tenants = Tenants(section, policy, install, metrics.sandboxes)
    install(tenants.tenancy)
    tenants.scan("start")
    return tenants


def _loaded(tenants: Tenants | None) -> Callable[[], list[str]] | None:
    """The ids of the sandboxes loaded now (for /status), or None without `sandboxes:`."""
    return None if tenants is None else lambda: list(tenants.directory.sandboxes)


def _on_sighup(reload: lifecycle.Reloader, tenants: Tenants | None) -> Callable[[], None]:
    def on_sighup() -> None:
        reload()
        if tenants is not None:
            tenants.scan("SIGHUP")

    return on_sighup


def _engine(name: str, switches: frozenset[str] = frozenset()) -> tuple[EngineOptions, Engine]:
    """The lean master (runtime/engine/lean.py), or mitmdump's own for comparison (`--engine`)."""
    if name == "mitmdump":
        from mitmproxy.options import Options
        from mitmproxy.tools.dump import DumpMaster

        options = Options()
        return options, DumpMaster(options, with_termlog=False, with_dumper=False)
    from sandbox_egress.runtime.engine.lean import LeanMaster, LeanOptions

    lean = LeanOptions()
    return lean, LeanMaster(lean, switches=switches)
