"""Addon wiring with mitmproxy's test flows: fail closed, pin, refuse, clean responses.

The end-to-end suite drives the real process; these cover the paths a real
network cannot force on demand (an exception in the policy, a resolver that
answers a rebinding sequence, a connection nobody decided).
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import socket
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.connection import Server
from mitmproxy.proxy import server_hooks
from mitmproxy.test import taddons, tflow

from sandbox_egress.addons.egress import EgressPolicy
from sandbox_egress.addons.refusal import refusal_response
from sandbox_egress.proxy.audit.log import AuditLog
from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.metrics import ProxyMetrics
from sandbox_egress.proxy.policy import Policy

SECRET = "s3cr3t-addon-test"


class Resolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, name: str, port: int) -> list[Any]:
        self.asked.append(name)
        if name not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in self.answers[name]]


def make_addon(
    resolver: Resolver, *allowlist: dict[str, object]
) -> tuple[EgressPolicy, ProxyMetrics, io.StringIO]:
    config = parse({"network": {"allowlist": list(allowlist)}}, "env.yaml", {"TOKEN": SECRET})
    metrics = ProxyMetrics()
    audit = io.StringIO()
    return EgressPolicy(Policy(config), metrics, AuditLog(audit), resolver=resolver), metrics, audit


def https_flow(host: str, headers: list[tuple[bytes, bytes]] | None = None) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.request.scheme = "https"
    flow.request.host = host
    flow.request.port = 443
    flow.request.headers = http.Headers(headers or [(b"Host", host.encode())])
    return flow


def count(metrics: ProxyMetrics, decision: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "egress_requests_total", {"decision": decision, "reason": reason}
    )
    return value or 0.0


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_exception_in_policy_is_a_counted_refusal() -> None:
    addon, metrics, _ = make_addon(Resolver({}), {"domain": "api.example"})

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    addon.policy.decide = explode  # type: ignore[method-assign]
    flow = https_flow("api.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
    assert flow.response is not None
    assert flow.response.status_code == 403
    assert flow.response.headers["X-Egress-Denied"] == "policy_error"
    assert json.loads(flow.response.content)["reason"] == "policy_error"
    errors = metrics.registry.get_sample_value("egress_policy_errors_total", {"stage": "request"})
    assert errors == 1.0
    assert count(metrics, "deny", "policy_error") == 1.0


def test_rebinding_answer_pins_the_checked_public_address() -> None:
    resolver = Resolver({"api.example": ["93.184.216.34", "127.0.0.1"]})
    addon, _, _ = make_addon(
        resolver, {"domain": "api.example", "transform": {"Authorization": "Bearer ${TOKEN}"}}
    )
    flow = https_flow(
        "api.example",
        [(b"Host", b"api.example"), (b"authorization", b"mine"), (b"AUTHORIZATION", b"also")],
    )
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        assert flow.response is None
        assert flow.request.headers.get_all("authorization") == [f"Bearer {SECRET}"]
        server = Server(address=("api.example", 443))
        data = server_hooks.ServerConnectionHookData(server=server, client=flow.client_conn)
        addon.pinning.server_connect(data)
        assert server.error is None
        assert server.address == ("93.184.216.34", 443)
        addon.pinning.server_connected(data)
        assert server.address == ("api.example", 443)  # so mitmproxy reuses it for the next request


def test_a_connection_nobody_decided_is_never_opened() -> None:
    addon, _, _ = make_addon(Resolver({}), {"domain": "*"})
    flow = https_flow("api.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        server = Server(address=("elsewhere.example", 443))
        addon.pinning.server_connect(
            server_hooks.ServerConnectionHookData(server=server, client=flow.client_conn)
        )
    assert server.error == "egress: no policy decision for this destination"
    assert server.address == ("elsewhere.example", 443)


def test_name_that_does_not_resolve_is_a_502_dns_failure() -> None:
    addon, metrics, audit = make_addon(Resolver({}), {"domain": "*"})
    flow = https_flow("nowhere.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        addon.responses.response(flow)
    assert flow.response is not None
    assert flow.response.status_code == 502
    assert flow.response.headers["X-Egress-Denied"] == "dns_failure"
    assert json.loads(flow.response.content)["error"] == "egress_failed"
    assert count(metrics, "deny", "dns_failure") == 1.0
    line = json.loads(audit.getvalue())
    assert (line["reason"], line["status"], line["host"], line["rule"]) == (
        "dns_failure",
        502,
        "nowhere.example",
        "*",
    )


def test_only_loopback_answers_are_refused_as_loopback() -> None:
    addon, _, _ = make_addon(Resolver({"evil.example": ["127.0.0.1", "::1"]}), {"domain": "*"})
    flow = https_flow("evil.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
    assert flow.response is not None
    assert flow.response.headers["X-Egress-Denied"] == "loopback"


def test_response_headers_are_cleaned_before_the_sandbox_sees_them() -> None:
    addon, _, _ = make_addon(
        Resolver({"api.example": ["93.184.216.34"]}),
        {"domain": "api.example", "transform": {"Authorization": "Bearer ${TOKEN}"}},
    )
    flow = https_flow("api.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        flow.response = http.Response.make(
            200,
            b"ok",
            {
                "X-Egress-Denied": "fake",
                "X-Echo": f"token=Bearer {SECRET};",
                "X-Echo-Token": f"t={SECRET}",
                "Other": "kept",
            },
        )
        addon.responses.responseheaders(flow)
    assert "X-Egress-Denied" not in flow.response.headers
    assert flow.response.headers["X-Echo"] == "token=[redacted];"
    assert flow.response.headers["X-Echo-Token"] == "t=[redacted]"
    assert flow.response.headers["Other"] == "kept"


def _injected_response(headers: dict[str, str]) -> tuple[EgressPolicy, http.HTTPFlow]:
    addon, _, _ = make_addon(
        Resolver({"api.example": ["93.184.216.34"]}),
        {"domain": "api.example", "transform": {"Authorization": "Bearer ${TOKEN}"}},
    )
    flow = https_flow("api.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        flow.response = http.Response.make(200, b"", headers)
        addon.responses.responseheaders(flow)
    return addon, flow


def _streamed(flow: http.HTTPFlow, chunks: list[bytes]) -> bytes:
    stream = flow.response.stream if flow.response else None
    assert callable(stream)
    out = [stream(chunk) for chunk in [*chunks, b""]]
    return b"".join(p if isinstance(p, bytes) else b"".join(p) for p in out)


def test_an_identity_body_is_streamed_with_the_secret_masked_across_chunks() -> None:
    _, flow = _injected_response({"Content-Type": "application/json"})
    body = _streamed(flow, [b'{"t": "' + SECRET[:5].encode(), SECRET[5:].encode() + b'"}'])
    assert body == b'{"t": "[redacted*******]"}'  # as long as the secret: Content-Length holds


def test_a_compressed_body_is_streamed_unscanned() -> None:
    # docs/decisions.md D32: what remains. The bytes pass as the upstream sent them.
    _, flow = _injected_response({"Content-Encoding": "gzip"})
    assert _streamed(flow, [SECRET.encode()]) == SECRET.encode()


def test_trailers_are_redacted_before_they_are_sent() -> None:
    addon, flow = _injected_response({"Content-Type": "text/plain"})
    assert flow.response is not None
    flow.response.trailers = http.Headers([(b"x-echo", f"t={SECRET.upper()}".encode())])
    with taddons.context(addon):
        addon.responses.response(flow)
    assert flow.response.trailers.fields == ((b"x-echo", b"t=[redacted]"),)


def test_trace_to_a_transform_host_is_refused_and_injects_nothing() -> None:
    addon, metrics, _ = make_addon(
        Resolver({"api.example": ["93.184.216.34"]}),
        {"domain": "api.example", "transform": {"Authorization": "Bearer ${TOKEN}"}},
    )
    flow = https_flow("api.example")
    flow.request.method = "TRACE"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
    assert flow.response is not None
    assert flow.response.headers["X-Egress-Denied"] == "method_not_allowed"
    assert "Authorization" not in flow.request.headers


def test_our_own_refusal_keeps_its_header() -> None:
    addon, _, _ = make_addon(Resolver({}), {"domain": "api.example"})
    flow = https_flow("other.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        addon.responses.responseheaders(flow)
    assert flow.response is not None
    assert flow.response.headers["X-Egress-Denied"] == "not_allowlisted"


def test_raw_tcp_inside_a_named_tunnel_is_closed() -> None:
    addon, metrics, _ = make_addon(
        Resolver({"git.example": ["93.184.216.34"]}), {"domain": "git.example"}
    )
    connect = tflow.tflow()
    connect.request.method = "CONNECT"
    connect.request.host, connect.request.port = "git.example", 22
    tcp_flow = tflow.ttcpflow(client_conn=connect.client_conn)
    with taddons.context(addon):
        addon.client_connected(connect.client_conn)
        run(addon.connect.http_connect(connect))
        assert connect.response is None  # the CONNECT itself was allowed
        assert addon.pinning.pinned(connect.client_conn, ("git.example", 22)) == (
            "93.184.216.34",
            22,
        )
        addon.tcp.tcp_start(tcp_flow)
    # Killed, and unpinned, so that mitmproxy's TCP layer cannot relay it anyway.
    assert tcp_flow.error is not None
    assert tcp_flow.error.msg == "Connection killed."
    assert addon.pinning.pinned(connect.client_conn, ("git.example", 22)) is None
    assert count(metrics, "deny", "not_allowlisted") == 1.0


def test_refused_upload_is_answered_only_when_small() -> None:
    """A refused request's body is read before the 403; a large one is closed instead."""
    addon, metrics, _ = make_addon(Resolver({}), {"domain": "api.example"})
    small = https_flow("other.example", [(b"Host", b"other.example"), (b"Content-Length", b"1024")])
    large = https_flow(
        "other.example", [(b"Host", b"other.example"), (b"Content-Length", b"10000000000")]
    )
    chunked = https_flow(
        "other.example", [(b"Host", b"other.example"), (b"Transfer-Encoding", b"chunked")]
    )
    with taddons.context(addon):
        for flow in (small, large, chunked):
            addon.client_connected(flow.client_conn)
            run(addon.requests.requestheaders(flow))
    assert small.response is not None
    assert small.response.status_code == 403
    for flow in (large, chunked):
        assert flow.response is None
        assert flow.error is not None
        assert flow.error.msg == "Connection killed."
    assert count(metrics, "deny", "not_allowlisted") == 3.0


def test_transform_is_never_sent_to_another_host_on_a_reused_connection() -> None:
    """Each allowed request is re-targeted at its own canonical host, the key mitmproxy reuses on."""
    addon, _, _ = make_addon(
        Resolver({"a.example": ["93.184.216.34"], "b.example": ["93.184.216.35"]}),
        {"domain": "a.example", "transform": {"Authorization": "Bearer ${TOKEN}"}},
        {"domain": "b.example"},
    )
    first = https_flow("A.Example", [(b"Host", b"A.Example")])
    second = https_flow("b.example")
    second.client_conn = first.client_conn
    with taddons.context(addon):
        addon.client_connected(first.client_conn)
        run(addon.requests.requestheaders(first))
        run(addon.requests.requestheaders(second))
    assert (first.request.host, second.request.host) == ("a.example", "b.example")
    assert "authorization" not in second.request.headers
    pins = addon.pinning._pins[first.client_conn.id]
    assert pins == {
        ("a.example", 443): ("93.184.216.34", 443),
        ("b.example", 443): ("93.184.216.35", 443),
    }


def client_hello(
    flow: http.HTTPFlow, sni: str | None, address: tuple[str, int] | None = None
) -> Any:
    from types import SimpleNamespace

    from mitmproxy import tls
    from mitmproxy.proxy.context import Context

    context = Context(flow.client_conn, taddons.context().options)
    context.server = Server(address=address)
    return tls.ClientHelloData(
        context=context, client_hello=SimpleNamespace(sni=sni, extensions=[], alpn_protocols=[])
    )  # type: ignore[arg-type]


def connect_flow(host: str, port: int = 443) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.request.method = "CONNECT"
    flow.request.host, flow.request.port = host, port
    return flow


def test_passthrough_tunnel_is_relayed_only_when_the_sni_names_the_target() -> None:
    addon, _, audit = make_addon(
        Resolver({"pkg.example": ["93.184.216.34"]}), {"domain": "pkg.example", "passthrough": True}
    )
    same, other = connect_flow("PKG.example"), connect_flow("pkg.example")
    with taddons.context(addon):
        for flow in (same, other):
            addon.client_connected(flow.client_conn)
            run(addon.connect.http_connect(flow))
            assert flow.response is None
        relayed, fronted = client_hello(same, "pkg.example"), client_hello(other, "evil.example")
        run(addon.clienthello.tls_clienthello(relayed))
        run(addon.clienthello.tls_clienthello(fronted))
    assert relayed.ignore_connection is True
    assert fronted.ignore_connection is False  # stays intercepted: its requests meet host_mismatch
    assert same.request.host == "pkg.example"  # the tunnel connects to the canonical, pinned name
    pins = addon.pinning._pins[same.client_conn.id]
    assert pins == {("pkg.example", 443): ("93.184.216.34", 443)}


def test_intercepted_entries_are_never_relayed() -> None:
    addon, _, _ = make_addon(
        Resolver({"api.example": ["93.184.216.34"]}), {"domain": "api.example"}
    )
    flow = connect_flow("api.example")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.connect.http_connect(flow))
        hello = client_hello(flow, "api.example")
        run(addon.clienthello.tls_clienthello(hello))
    assert hello.ignore_connection is False


def test_transparent_passthrough_connects_to_the_name_not_the_original_destination() -> None:
    from mitmproxy.proxy.mode_specs import ProxyMode

    addon, metrics, audit = make_addon(
        Resolver({"pkg.example": ["93.184.216.34"]}), {"domain": "pkg.example", "passthrough": True}
    )
    flow = tflow.tflow()
    flow.client_conn.proxy_mode = ProxyMode.parse("transparent")
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        hello = client_hello(flow, "pkg.example", address=("203.0.113.66", 443))
        run(addon.clienthello.tls_clienthello(hello))
    assert hello.ignore_connection is True
    assert addon.pinning.pinned(flow.client_conn, ("203.0.113.66", 443)) == ("93.184.216.34", 443)
    line = json.loads(audit.getvalue())
    assert (line["method"], line["host"], line["decision"], line["rule"]) == (
        "TLS",
        "pkg.example",
        "allow",
        "pkg.example",
    )
    assert count(metrics, "allow", "allowlisted") == 1.0


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        (Reason.NOT_ALLOWLISTED, "egress_denied"),
        (Reason.BUDGET_EXCEEDED, "egress_denied"),  # 429: a refusal like every other
        (Reason.DNS_FAILURE, "egress_failed"),  # 502: the proxy could not do it
    ],
)
def test_the_refusal_body_names_a_refusal_denied_and_a_failure_failed(
    reason: Reason, error: str
) -> None:
    body = json.loads(refusal_response(Decision.deny(reason), "h.example").content)
    assert (body["error"], body["reason"]) == (error, reason.value)


def test_the_audit_line_names_the_path_with_query_values_masked() -> None:
    """A rule_mismatch can only be investigated with the path (issue 35)."""
    addon, _, audit = make_addon(
        Resolver({}), {"domain": "api.example", "rules": [{"methods": ["POST"]}]}
    )
    flow = https_flow("api.example")
    flow.request.path = "/repos/acme/web?token=sk-not-for-the-log&page=2"
    with taddons.context(addon):
        addon.client_connected(flow.client_conn)
        run(addon.requests.requestheaders(flow))
        addon.responses.response(flow)
    line = json.loads(audit.getvalue())
    assert (line["reason"], line["method"], line["path"]) == (
        "rule_mismatch",
        "GET",
        "/repos/acme/web?token=…&page=…",
    )
    assert "sk-not-for-the-log" not in audit.getvalue()
