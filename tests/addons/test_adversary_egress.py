"""Addon wiring against a hostile sandbox, where only mitmproxy's test flows can force the
order of events: a configuration reload that lands while a request's name is being
resolved (issue 10 item 7, docs/decisions.md D24), and raw TCP in a named tunnel (D21).

The end-to-end counterparts are tests/e2e/test_adversary_*_e2e.py.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.connection import Server
from mitmproxy.proxy import server_hooks
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.policy import Policy
from tests.addons.test_egress import SECRET, Resolver, https_flow, make_addon, run

NAME_ONLY = [{"domain": "*.example"}]  # a name whose only address is private: refused
NAME_AND_RANGE = [*NAME_ONLY, {"domain": "10.0.0.0/8"}]  # the private range opened


def policy(allowlist: list[dict[str, object]]) -> Policy:
    return Policy(parse({"network": {"allowlist": allowlist}}, "env.yaml", {"TOKEN": SECRET}))


class ReloadDuringLookup:
    """A resolver during whose lookup the configuration is reloaded (SIGHUP's assignment)."""

    def __init__(self, fresh: Policy) -> None:
        self.fresh = fresh
        self.addon: EgressPolicy | None = None

    async def __call__(self, name: str, port: int) -> list[Any]:
        assert self.addon is not None
        self.addon.policy = self.fresh
        return [ipaddress.ip_address("10.0.0.5")]


def addon_reloaded_mid_lookup(
    before: list[dict[str, object]], after: list[dict[str, object]]
) -> EgressPolicy:
    resolver = ReloadDuringLookup(policy(after))
    addon, _, _ = make_addon(resolver, *before)  # type: ignore[arg-type]
    resolver.addon = addon
    return addon


@pytest.mark.parametrize(
    ("before", "after", "status"),
    [
        (NAME_ONLY, NAME_AND_RANGE, 403),  # decided and pinned by the policy that refuses
        (NAME_AND_RANGE, NAME_ONLY, None),  # decided and pinned by the policy that opens
    ],
    ids=["reload-opens-the-range", "reload-closes-the-range"],
)
def test_a_request_is_decided_and_pinned_by_one_policy(
    before: list[dict[str, object]], after: list[dict[str, object]], status: int | None
) -> None:
    addon = addon_reloaded_mid_lookup(before, after)
    flow = https_flow("db.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        server = Server(address=("db.example", 443))
        addon.pinning.server_connect(
            server_hooks.ServerConnectionHookData(server=server, client=flow.client_conn)
        )

    if status is None:
        assert flow.response is None
        assert server.error is None
        assert server.address == ("10.0.0.5", 443)
    else:
        assert flow.response is not None
        assert flow.response.status_code == status
        assert flow.response.headers["X-Egress-Denied"] == "internal_address"
        assert server.error is not None  # nothing pinned: never connected


def test_a_connect_is_decided_and_pinned_by_one_policy() -> None:
    addon = addon_reloaded_mid_lookup(NAME_ONLY, NAME_AND_RANGE)
    connect = tflow.tflow()
    connect.request.method = "CONNECT"
    connect.request.host, connect.request.port = "db.example", 443
    with taddons.context(addon):
        addon.client_connected(connect.client_conn)
        run(addon.connect.http_connect(connect))

    assert connect.response is not None
    assert connect.response.status_code == 403
    assert connect.response.headers["X-Egress-Denied"] == "internal_address"
    assert addon.pinning.pinned(connect.client_conn, ("db.example", 443)) is None


def test_raw_tcp_refused_in_a_named_tunnel_unpins_the_tunnel() -> None:
    addon, _, _ = make_addon(Resolver({"git.example": ["93.184.216.34"]}), *NAME_ONLY)
    connect = tflow.tflow()
    connect.request.method = "CONNECT"
    connect.request.host, connect.request.port = "git.example", 22
    tcp_flow = tflow.ttcpflow(client_conn=connect.client_conn)
    with taddons.context(addon):
        addon.client_connected(connect.client_conn)
        run(addon.connect.http_connect(connect))
        assert addon.pinning.pinned(connect.client_conn, ("git.example", 22)) is not None
        addon.tcp.tcp_start(tcp_flow)
        server = Server(address=("git.example", 22))
        addon.pinning.server_connect(
            server_hooks.ServerConnectionHookData(server=server, client=connect.client_conn)
        )

    assert server.error == "egress: no policy decision for this destination"


@pytest.mark.parametrize(
    ("trailers", "kept"),
    [
        ([(b"X-Checksum", b"abc")], True),
        ([(b"X-T", b"a\rHost: evil.example")], False),  # bare CR
        ([(b"X-T", b"one\r\n two")], False),  # obs-fold
        ([(b"X-T", b"a\x00b")], False),
        ([(b"X\x00T", b"v")], False),
    ],
)
def test_request_trailers_with_forbidden_bytes_are_dropped(
    trailers: list[tuple[bytes, bytes]], kept: bool
) -> None:
    addon, _, _ = make_addon(Resolver({}), *NAME_ONLY)
    flow = https_flow("db.example")
    flow.request.trailers = http.Headers(trailers)
    with taddons.context(addon):
        addon.requests.request(flow)

    assert (flow.request.trailers is not None) is kept
