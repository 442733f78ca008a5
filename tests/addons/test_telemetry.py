"""addons/telemetry.py through mitmproxy's own hook dispatch, and the resolver wrapper.

Each hook is fired by name through a real `AddonManager` (`taddons`), so a hook that
mitmproxy renames or whose data changes fails here, not silently in production.
"""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from mitmproxy import tcp, websocket
from mitmproxy.proxy import context, server_hooks
from mitmproxy.proxy.layers import tcp as tcp_layer
from mitmproxy.proxy.layers import tls as tls_layer
from mitmproxy.proxy.layers import websocket as websocket_layer
from mitmproxy.test import taddons, tflow
from mitmproxy.tls import TlsData
from wsproto.frame_protocol import Opcode

from sandbox_egress.addons.telemetry import CountingAudit, Telemetry
from sandbox_egress.proxy.audit.log import AuditRecord
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.metrics import DIRECTIONS, DNS_RESULTS, UPSTREAM_ERRORS, ProxyMetrics
from sandbox_egress.proxy.resolver import MeasuredResolver


def value(metrics: ProxyMetrics, name: str, **labels: str) -> float:
    found = metrics.registry.get_sample_value(name, labels)
    assert found is not None, f"{name}{labels} is not exported"
    return found


def counts(metrics: ProxyMetrics) -> dict[str, float]:
    """Every series of the telemetry metrics, by a short name."""
    found = {"client_tls": value(metrics, "egress_client_tls_failures_total")}
    for kind in UPSTREAM_ERRORS:
        found[kind] = value(metrics, "egress_upstream_errors_total", kind=kind)
    for direction in DIRECTIONS:
        found[direction] = value(metrics, "egress_bytes_total", direction=direction)
    return found


ZERO = {"client_tls": 0.0, "connect": 0.0, "tls": 0.0, "upstream": 0.0, "downstream": 0.0}


@pytest.fixture
def metrics() -> ProxyMetrics:
    return ProxyMetrics()


def fire(metrics: ProxyMetrics, hook: object) -> dict[str, float]:
    with taddons.context(Telemetry(metrics)) as tctx:
        tctx.master.addons.trigger(hook)  # type: ignore[arg-type]
    return counts(metrics)


def test_every_series_exists_at_zero(metrics: ProxyMetrics) -> None:
    assert counts(metrics) == ZERO
    for result in DNS_RESULTS:
        assert value(metrics, "egress_dns_lookups_total", result=result) == 0.0
    assert value(metrics, "egress_dns_lookup_seconds_count") == 0.0


def test_a_failed_client_handshake(metrics: ProxyMetrics) -> None:
    client = tflow.tclient_conn()
    with taddons.context() as tctx:
        data = TlsData(client, context.Context(client, tctx.options))
    assert fire(metrics, tls_layer.TlsFailedClientHook(data)) == {**ZERO, "client_tls": 1.0}


def test_a_failed_upstream_handshake(metrics: ProxyMetrics) -> None:
    client, server = tflow.tclient_conn(), tflow.tserver_conn()
    with taddons.context() as tctx:
        data = TlsData(server, context.Context(client, tctx.options))
    assert fire(metrics, tls_layer.TlsFailedServerHook(data)) == {**ZERO, "tls": 1.0}


def test_a_refused_upstream_connection(metrics: ProxyMetrics) -> None:
    server = tflow.tserver_conn()  # timestamp_start set: a connect was attempted
    server.error = "Connection refused"
    data = server_hooks.ServerConnectionHookData(server, tflow.tclient_conn())
    assert fire(metrics, server_hooks.ServerConnectErrorHook(data)) == {**ZERO, "connect": 1.0}


def test_a_connection_the_policy_killed_is_not_an_upstream_error(metrics: ProxyMetrics) -> None:
    server = tflow.tserver_conn()
    server.timestamp_start = None  # killed in server_connect, before any connect
    server.error = "egress: no policy decision for this destination"
    data = server_hooks.ServerConnectionHookData(server, tflow.tclient_conn())
    assert fire(metrics, server_hooks.ServerConnectErrorHook(data)) == ZERO


def test_tcp_messages_by_direction(metrics: ProxyMetrics) -> None:
    flow = tflow.ttcpflow(messages=[tcp.TCPMessage(True, b"hello")])
    assert fire(metrics, tcp_layer.TcpMessageHook(flow)) == {**ZERO, "upstream": 5.0}
    flow.messages.append(tcp.TCPMessage(False, b"it's me"))
    assert fire(metrics, tcp_layer.TcpMessageHook(flow)) == {**ZERO, "upstream": 5, "downstream": 7}


def test_websocket_messages_by_direction(metrics: ProxyMetrics) -> None:
    flow = tflow.twebsocketflow(messages=False)
    assert flow.websocket is not None
    flow.websocket.messages = [websocket.WebSocketMessage(Opcode.TEXT, False, b"pong!!")]
    assert fire(metrics, websocket_layer.WebsocketMessageHook(flow)) == {**ZERO, "downstream": 6}


def record(sent: int, received: int) -> AuditRecord:
    return AuditRecord(
        "198.18.0.1:5000", "POST", "https", "api.allowed.test", 443, "allow", "allowlisted",
        "api.allowed.test", (), 200, sent, received, 0.01,
    )  # fmt: skip


def test_http_bodies_are_counted_from_the_audit_record(metrics: ProxyMetrics) -> None:
    written: list[AuditRecord] = []

    class Sink:
        def write(self, line: AuditRecord) -> None:
            written.append(line)

    audit = CountingAudit(Sink(), metrics)
    audit.write(record(5000, 120))
    audit.write(record(0, 0))  # a refusal: nothing crossed
    assert written == [record(5000, 120), record(0, 0)]  # passed on unchanged
    assert counts(metrics) == {**ZERO, "upstream": 5000.0, "downstream": 120.0}


async def _answer(name: str, port: int) -> list[IPAddress]:
    if name == "missing.test":
        raise OSError(-2, "Name or service not known")
    if name == "slow.test":
        await asyncio.sleep(10)
    return [ipaddress.ip_address("198.18.1.2")]


def test_resolver_lookups_counted_by_result_and_timed() -> None:
    seen: list[tuple[str, float]] = []
    ticks = iter(range(100))
    resolve = MeasuredResolver(_answer, lambda r, s: seen.append((r, s)), lambda: next(ticks))

    async def lookups() -> None:
        assert await resolve("api.test", 443) == [ipaddress.ip_address("198.18.1.2")]
        with pytest.raises(OSError):
            await resolve("missing.test", 443)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await resolve("slow.test", 443)

    asyncio.run(lookups())
    assert seen == [("ok", 1), ("failed", 1), ("timeout", 1)]
