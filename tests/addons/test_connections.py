"""The connection bounds addon (addons/connections.py) with mitmproxy's test clients."""

from __future__ import annotations

from mitmproxy import connection
from mitmproxy.test import tflow

from sandbox_egress.addons.connections import Connections
from sandbox_egress.proxy.fairness import FairShare, client_key
from sandbox_egress.proxy.metrics import ProxyMetrics


def client(address: str) -> connection.Client:
    conn = tflow.tclient_conn()
    conn.peername = (address, 40000)
    return conn


def refused(metrics: ProxyMetrics, bound: str) -> float:
    value = metrics.registry.get_sample_value(
        "egress_bound_hits_total", {"bound": bound, "outcome": "refused"}
    )
    return value or 0.0


def test_past_its_share_a_client_is_closed_and_another_is_not() -> None:
    metrics = ProxyMetrics()
    addon = Connections(metrics, FairShare(total=3, per_client=2))
    a = [client("198.19.0.1") for _ in range(3)]
    b, c = client("198.19.0.2"), client("::ffff:198.19.0.3")
    for conn in (*a, b, c):
        addon.client_connected(conn)
    assert [conn.error for conn in (*a, b, c)] == [
        None,
        None,
        "refused: connections_per_client connections reached",
        None,
        "refused: connections_total connections reached",
    ]
    assert refused(metrics, "connections_per_client") == 1
    assert refused(metrics, "connections_total") == 1
    # A refused connection gives back nothing; a closed one gives back its slot, once.
    for conn in (a[2], c, a[0], a[0]):
        addon.client_disconnected(conn)
    assert (addon.slots.in_use, addon.slots.held(client_key("198.19.0.1"))) == (2, 1)
    again = client("198.19.0.3")
    addon.client_connected(again)
    assert again.error is None
