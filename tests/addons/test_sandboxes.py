"""The sandbox identity addon with mitmproxy's test flows (1.12): what the end-to-end suite
cannot force on demand (the chain stopping, a refused large upload, the bound in
transparent mode, the quota given back on disconnect)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions, http
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.addons.layers import linger
from sandbox_egress.addons.layers.limits import BODY_FOLLOWS
from sandbox_egress.proxy.audit.log import AuditLog
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy
from sandbox_egress.proxy.tenancy.sandboxes import Identify, SandboxesSection, parse_sandbox
from sandbox_egress.proxy.tenancy.tenants import Tenancy

TOKEN = "alpha-token-0123456789"
CLIENT = ("198.18.0.2", 40000)


def make(*identify: Identify, bound: int = 8) -> tuple[EgressPolicy, ProxyMetrics, io.StringIO]:
    node = Policy(parse({"network": {"allowlist": [{"domain": "*"}]}}, "node.yaml", {}))
    alpha = parse_sandbox(
        {
            "token": TOKEN,
            "class": "agents",
            "addresses": [CLIENT[0]],
            "network": {"allowlist": [{"domain": "93.184.216.34"}]},
        },
        "alpha.yaml",
        "alpha",
    )
    section = SandboxesSection(Path("/d"), identify or tuple(Identify), bound)
    audit = io.StringIO()
    metrics = ProxyMetrics()
    addon = EgressPolicy(node, metrics, AuditLog(audit))
    addon.shared.tenancy = Tenancy(section, node).rebuilt({"alpha": alpha}, node, frozenset())
    return addon, metrics, audit


def basic(user: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def flow_to(host: str, auth: str | None = None, transparent: bool = False) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.client_conn.peername = CLIENT
    if transparent:
        flow.client_conn.proxy_mode = ProxyMode.parse("transparent")
    flow.request.host, flow.request.port = host, 80
    flow.request.headers = http.Headers([(b"Host", host.encode())])
    if auth is not None:
        flow.request.headers["Proxy-Authorization"] = auth
    return flow


def connected(addon: EgressPolicy, client: Any) -> None:
    """What mitmproxy's addon manager does: the parent's hook, then its sub-addons'."""
    addon.client_connected(client)
    addon.identity.client_connected(client)


def disconnected(addon: EgressPolicy, client: Any) -> None:
    addon.client_disconnected(client)
    addon.identity.client_disconnected(client)


def identifications(metrics: ProxyMetrics, result: str) -> float:
    sample = metrics.registry.get_sample_value(
        "egress_sandbox_identifications_total", {"result": result}
    )
    return sample or 0.0


def test_a_wrong_credential_is_407_and_stops_the_chain() -> None:
    addon, metrics, audit = make(Identify.PROXY_AUTH)
    flow = flow_to("93.184.216.34", basic("alpha", "wrong-token-0123456789"))
    with taddons.context(addon):
        connected(addon, flow.client_conn)
        with pytest.raises(exceptions.AddonHalt):
            addon.identity.http_connect(flow)
    assert flow.response is not None and flow.response.status_code == 407
    assert flow.response.headers["Proxy-Authenticate"] == 'Basic realm="egress-proxy"'
    assert "Proxy-Authorization" not in flow.request.headers
    line = json.loads(audit.getvalue())
    assert (line["method"], line["status"], line["reason"]) == ("CONNECT", 407, "unknown_sandbox")
    assert "sandbox" not in line and TOKEN not in audit.getvalue()
    assert identifications(metrics, "auth_required") == 1


def test_credentials_identify_once_and_are_never_forwarded() -> None:
    addon, metrics, audit = make()
    first = flow_to("93.184.216.34", basic("alpha", TOKEN))
    with taddons.context(addon):
        connected(addon, first.client_conn)
        addon.identity.requestheaders(first)
        assert addon.shared.facts(first.client_conn).sandbox == "alpha"
        assert "Proxy-Authorization" not in first.request.headers
        second = flow_to("93.184.216.34", basic("alpha", "another-token-0123456789"))
        second.client_conn = first.client_conn
        addon.identity.requestheaders(second)  # decided once: not asked again
        assert "Proxy-Authorization" not in second.request.headers
        assert addon.shared.policy_for(first.client_conn) is addon.shared.tenancy.policies["alpha"]  # type: ignore[union-attr]
        disconnected(addon, first.client_conn)
    assert identifications(metrics, "identified") == 1
    gauge = metrics.registry.get_sample_value(
        "egress_sandbox_connections", {"sandbox_class": "agents"}
    )
    assert gauge == 0


def test_an_unclaimed_address_is_unknown_sandbox_and_a_large_body_is_answered_unread() -> None:
    linger.install()
    addon, metrics, _ = make(Identify.SOURCE_ADDRESS)
    flow = flow_to("93.184.216.34")
    flow.client_conn.peername = ("198.18.0.9", 40000)
    flow.request.headers["Content-Length"] = str(10 * 1024 * 1024)
    flow.metadata[BODY_FOLLOWS] = True

    async def refuse() -> None:
        with pytest.raises(exceptions.AddonHalt):
            addon.identity.requestheaders(flow)

    with taddons.context(addon):
        connected(addon, flow.client_conn)
        asyncio.run(refuse())
    # answered before the body is read, which is then dropped (lingering close, D350)
    assert flow.response is not None and flow.response.status_code == 403
    assert flow.response.headers["Connection"] == "close"
    assert flow.metadata[linger.LINGER] is True and flow.error is None
    assert identifications(metrics, "unknown_sandbox") == 1


def test_unknown_sandbox_answer_is_the_readable_403() -> None:
    addon, _, _ = make(Identify.SOURCE_ADDRESS)
    flow = flow_to("93.184.216.34")
    flow.client_conn.peername = ("198.18.0.9", 40000)
    with taddons.context(addon):
        connected(addon, flow.client_conn)
        with pytest.raises(exceptions.AddonHalt):
            addon.identity.http_connect(flow)
    assert flow.response is not None and flow.response.status_code == 403
    assert flow.response.headers["X-Egress-Denied"] == "unknown_sandbox"


def test_transparent_connections_are_bounded_per_sandbox() -> None:
    addon, metrics, _ = make(bound=1)
    first, second = flow_to("x", transparent=True), flow_to("x", transparent=True)
    with taddons.context(addon):
        for flow in (first, second):
            connected(addon, flow.client_conn)
        assert addon.shared.facts(first.client_conn).sandbox == "alpha"
        assert first.client_conn.error is None
        assert second.client_conn.error is not None  # closed before anything is read
        disconnected(addon, first.client_conn)
        third = flow_to("x", transparent=True)
        connected(addon, third.client_conn)
        assert third.client_conn.error is None  # the bound was given back
    refusals = metrics.registry.get_sample_value(
        "egress_sandbox_connection_refusals_total", {"sandbox_class": "agents"}
    )
    assert refusals == 1


def test_regular_connection_over_the_bound_is_429() -> None:
    addon, _, _ = make(bound=1)
    flows = [flow_to("93.184.216.34", basic("alpha", TOKEN)) for _ in range(2)]
    with taddons.context(addon):
        for flow in flows:
            connected(addon, flow.client_conn)
        addon.identity.http_connect(flows[0])
        with pytest.raises(exceptions.AddonHalt):
            addon.identity.http_connect(flows[1])
    response: Any = flows[1].response
    assert (response.status_code, response.headers["Retry-After"]) == (429, "1")
    assert response.headers["X-Egress-Denied"] == "connection_limit"


def test_without_sandboxes_nothing_changes() -> None:
    addon, _, _ = make()
    addon.shared.tenancy = None
    flow = flow_to("93.184.216.34", basic("alpha", TOKEN))
    with taddons.context(addon):
        connected(addon, flow.client_conn)
        addon.identity.http_connect(flow)
        addon.identity.requestheaders(flow)
    assert flow.response is None
    assert addon.shared.policy_for(flow.client_conn) is addon.shared.policy
