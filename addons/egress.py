"""The egress policy as a mitmproxy addon: decide, pin, inject, refuse, audit.

Each hook turns the flow into plain values, asks `proxy.policy`, and applies
the answer. The addon fails closed: an exception in a deciding hook becomes a
`policy_error` refusal (counted), and an upstream connection that no decision
pinned is never opened.

Life of an HTTPS request in regular mode:
1. `http_connect` decides the CONNECT target (name and resolved addresses) and
   refuses with 403 before any tunnel; an allowed target is remembered as the
   tunnel of that client connection.
2. `requestheaders` decides every request again (each one on a kept-alive
   connection), checks Host/:authority/SNI against the tunnel, resolves the
   name, pins the first permitted address, and writes the transform headers.
3. `server_connect` connects only to the pinned address (no second lookup);
   `server_connected` puts the host name back so mitmproxy reuses the
   connection for the next request to the same host.
4. `responseheaders` strips an upstream's `X-Egress-Denied`, redacts echoed
   secrets, and streams the body; `response`/`error` write the audit line.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy import connection, http, tcp
from mitmproxy.proxy import server_hooks

from addons.refusal import refusal_response
from proxy.audit import AuditLog, AuditRecord
from proxy.decision import Decision, Reason
from proxy.hosts import Host, HostError, IPAddress, canonical_host, parse_authority
from proxy.metrics import ProxyMetrics
from proxy.policy import Policy
from proxy.redact import redact

log = logging.getLogger("egress")

RESOLVE_TIMEOUT_S = 5.0
DENIED_HEADER = "X-Egress-Denied"
_META = "egress"


@dataclass
class FlowState:
    """What the addon knows about one request; kept in `flow.metadata`."""

    decision: Decision
    host: str
    started: float = field(default_factory=time.monotonic)
    injected: tuple[str, ...] = ()
    refused_here: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass
class ClientState:
    tunnel: tuple[Host, int] | None = None
    # (host as mitmproxy will connect to it, port) -> the checked address to use instead.
    pins: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    # Server connections we redirected, to restore their name once connected.
    renamed: dict[str, tuple[str, int]] = field(default_factory=dict)


class EgressPolicy:
    def __init__(
        self,
        policy: Policy,
        metrics: ProxyMetrics,
        audit: AuditLog,
        on_running: Callable[[], None] | None = None,
        resolver: Callable[[str, int], asyncio.Future[list[IPAddress]]] | None = None,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.audit = audit
        self._on_running = on_running
        self._clients: dict[str, ClientState] = {}
        self._resolve = resolver or system_resolve

    # -- lifecycle --------------------------------------------------------------

    def running(self) -> None:
        if self._on_running is not None:
            self._on_running()

    def client_connected(self, client: connection.Client) -> None:
        self._clients[client.id] = ClientState()
        self.metrics.active_connections.inc()

    def client_disconnected(self, client: connection.Client) -> None:
        if self._clients.pop(client.id, None) is not None:
            self.metrics.active_connections.dec()

    def _client(self, client: connection.Client) -> ClientState:
        return self._clients.setdefault(client.id, ClientState())

    # -- CONNECT -------------------------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        started = time.monotonic()
        host_text = flow.request.host
        try:
            decision, host, port = await self._decide_connect(flow)
            if host is not None:
                host_text = str(host)
        except Exception:  # noqa: BLE001 - fail closed, and count it
            log.exception("policy error on CONNECT")
            self.metrics.policy_errors.inc()
            decision, host, port = Decision.deny(Reason.POLICY_ERROR), None, None
        self.metrics.requests.labels(decision.verdict, decision.reason.value).inc()
        if decision.allowed:
            assert host is not None and port is not None
            self._client(flow.client_conn).tunnel = (host, port)
        else:
            flow.response = refusal_response(decision, host_text)
        self._write_audit(flow, decision, host_text, port, started, 0, 0, (), status=200)

    async def _decide_connect(
        self, flow: http.HTTPFlow
    ) -> tuple[Decision, Host | None, int | None]:
        try:
            host, port = parse_authority(flow.request.host, flow.request.port)
        except HostError:
            return Decision.deny(Reason.BAD_REQUEST), None, None
        decision = self.policy.decide(host, port, tls=None)
        decision, pinned = await self._pin(decision, host, port)
        if pinned is not None:
            self._client(flow.client_conn).pins[(flow.request.host, port)] = (str(pinned), port)
        return decision, host, port

    # -- requests --------------------------------------------------------------------

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        state = FlowState(Decision.deny(Reason.POLICY_ERROR), flow.request.host[:255])
        flow.metadata[_META] = state
        try:
            await self._decide_request(flow, state)
        except Exception:  # noqa: BLE001 - fail closed, and count it
            log.exception("policy error on request")
            self.metrics.policy_errors.inc()
            state.decision = Decision.deny(Reason.POLICY_ERROR)
            state.injected = ()
        self.metrics.requests.labels(state.decision.verdict, state.decision.reason.value).inc()
        if state.decision.allowed:
            flow.request.stream = _counter(state, "bytes_sent")
        else:
            self._refuse(flow, state)

    async def _decide_request(self, flow: http.HTTPFlow, state: FlowState) -> None:
        request = flow.request
        client = self._client(flow.client_conn)
        try:
            host = canonical_host(request.host)
        except HostError:
            state.decision = Decision.deny(Reason.BAD_REQUEST)
            return
        state.host = str(host)
        port = request.port
        mismatch = self._host_mismatch(flow, host, client)
        if mismatch is not None:
            state.decision = mismatch
            return
        if client.tunnel is not None:
            port = client.tunnel[1]
            request.data.port = port
        decision = self.policy.decide(host, port, tls=request.scheme == "https")
        decision, pinned = await self._pin(decision, host, port)
        state.decision = decision
        if pinned is None:
            return
        client.pins[(request.host, port)] = (str(pinned), port)
        entry = decision.entry
        if entry is not None and entry.transform:
            for transform in entry.transform:
                request.headers[transform.header] = transform.value.reveal()
            state.injected = tuple(t.header for t in entry.transform)
            self.metrics.injections.labels(entry.pattern).inc()

    def _host_mismatch(
        self, flow: http.HTTPFlow, host: Host, client: ClientState
    ) -> Decision | None:
        """Domain fronting: the Host/:authority, the SNI and the CONNECT target must agree."""
        request = flow.request
        named_port = 0  # 0: the Host header carries no explicit port
        if request.host_header is not None:
            try:
                named, named_port = parse_authority(request.host_header, 0)
            except HostError:
                return Decision.deny(Reason.BAD_REQUEST)
            if named != host:
                return Decision.deny(Reason.HOST_MISMATCH)
        if client.tunnel is None:
            if named_port and named_port != request.port:
                return Decision.deny(Reason.HOST_MISMATCH)
            return None
        target, target_port = client.tunnel
        if host != target or named_port not in (0, target_port):
            return Decision.deny(Reason.HOST_MISMATCH)
        sni = flow.client_conn.sni
        if sni:
            try:
                if canonical_host(sni) != target:
                    return Decision.deny(Reason.HOST_MISMATCH)
            except HostError:
                return Decision.deny(Reason.BAD_REQUEST)
        return None

    async def _pin(
        self, decision: Decision, host: Host, port: int
    ) -> tuple[Decision, IPAddress | None]:
        """Resolve an allowed name and keep the first address the policy permits."""
        if not decision.allowed:
            return decision, None
        if host.ip is not None:
            return decision, host.ip
        assert host.name is not None
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                addresses = await self._resolve(host.name, port)
        except (OSError, TimeoutError):
            addresses = []
        return self.policy.pick_address(decision, addresses, port)

    def _refuse(self, flow: http.HTTPFlow, state: FlowState) -> None:
        state.refused_here = True
        flow.request.stream = False
        flow.response = refusal_response(state.decision, state.host)

    # -- upstream connections -------------------------------------------------------------

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        server = data.server
        try:
            client = self._clients.get(data.client.id)
            pinned = client.pins.get(server.address) if client and server.address else None
            if pinned is None:
                server.error = "egress: no policy decision for this destination"
                return
            assert client is not None and server.address is not None
            client.renamed[server.id] = server.address
            server.address = pinned
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("policy error on server connect")
            self.metrics.policy_errors.inc()
            server.error = "egress: policy error"

    def server_connected(self, data: server_hooks.ServerConnectionHookData) -> None:
        client = self._clients.get(data.client.id)
        if client is not None and (name := client.renamed.pop(data.server.id, None)):
            # Connected to the checked address; the name is what mitmproxy matches
            # later requests against, so that a kept-alive connection is reused.
            data.server.address = name

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        client = self._clients.get(data.client.id)
        if client is not None:
            client.renamed.pop(data.server.id, None)

    # -- non-HTTP tunnels ------------------------------------------------------------------

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        """Raw TCP inside a CONNECT only reaches explicit IP/CIDR entries (SPEC 1.6)."""
        client = self._clients.get(flow.client_conn.id)
        tunnel = client.tunnel if client else None
        allowed = False
        if tunnel is not None and tunnel[0].ip is not None:
            entry = self.policy.entry_for_address(tunnel[0].ip)
            allowed = entry is not None and entry.allows_port(tunnel[1])
        if not allowed:
            self.metrics.requests.labels("deny", Reason.NOT_ALLOWLISTED.value).inc()
            flow.kill()

    # -- responses ---------------------------------------------------------------------------

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.get(_META)
        if state is None or state.refused_here or flow.response is None:
            return
        try:
            headers = flow.response.headers
            headers.pop(DENIED_HEADER, None)
            secrets = self.policy.config.secrets()
            if secrets:
                headers.fields = tuple(
                    (name, redact(value, secrets)) for name, value in headers.fields
                )
            flow.response.stream = _counter(state, "bytes_received")
        except Exception:  # noqa: BLE001 - never forward what we could not clean
            log.exception("policy error on response headers")
            self.metrics.policy_errors.inc()
            flow.kill()

    def response(self, flow: http.HTTPFlow) -> None:
        self._finish(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._finish(flow)

    def _finish(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.pop(_META, None)
        if state is None:
            return
        self.metrics.duration.labels(state.decision.verdict).observe(
            time.monotonic() - state.started
        )
        self._write_audit(
            flow,
            state.decision,
            state.host,
            flow.request.port,
            state.started,
            state.bytes_sent,
            state.bytes_received,
            state.injected,
        )

    def _write_audit(
        self,
        flow: http.HTTPFlow,
        decision: Decision,
        host: str,
        port: int | None,
        started: float,
        sent: int,
        received: int,
        injected: tuple[str, ...],
        status: int | None = None,
    ) -> None:
        peer = flow.client_conn.peername
        if flow.response is not None:
            status = flow.response.status_code
        self.audit.write(
            AuditRecord(
                client=f"{peer[0]}:{peer[1]}" if peer else "",
                method=flow.request.method[:16],
                scheme=flow.request.scheme,
                host=host,
                port=port,
                decision=decision.verdict,
                reason=decision.reason.value,
                rule=decision.entry.pattern if decision.entry else None,
                injected=injected,
                status=status,
                bytes_sent=sent,
                bytes_received=received,
                duration_s=time.monotonic() - started,
            )
        )


def _counter(state: FlowState, attribute: str) -> Callable[[bytes], bytes]:
    """A mitmproxy stream callable that passes chunks through and counts their bytes."""

    def count(chunk: bytes) -> bytes:
        setattr(state, attribute, getattr(state, attribute) + len(chunk))
        return chunk

    return count


async def system_resolve(name: str, port: int) -> list[IPAddress]:
    """The system resolver (so /etc/hosts and resolv.conf apply), answers in its order."""
    import ipaddress

    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]), None)
    return list(seen)
