"""The egress policy as a mitmproxy addon: decide, pin, inject, refuse, audit.

Each hook turns the flow into plain values, asks `proxy.policy`, and applies
the answer. The addon fails closed: an exception in a deciding hook becomes a
`policy_error` refusal (counted), and an upstream connection that no decision
pinned is never opened.

A client connection has a *target* once it is known: the CONNECT authority in
regular mode, the TLS SNI (or, without SNI, the original destination address)
with the original port in transparent mode. Every request on that connection
must name the target in its Host/:authority and its request-target, which an
upstream then receives in origin-form (domain fronting, SPEC 1.6; `addons.targets`).
Each hook reads `self.policy` once: a reload never splits one decision (D24).

Life of a request:
1. (regular) `http_connect` decides the CONNECT target and refuses with 403
   before any tunnel. (transparent) `tls_clienthello` records the SNI.
2. `requestheaders` decides every request again (each one on a kept-alive
   connection or HTTP/2 stream): it refuses header bytes no upstream may see,
   resolves the name, pins the first permitted address, and writes the transform
   headers. `request` drops a trailer block with such bytes (D21).
3. `addons.pinning` connects only to the pinned address (no second lookup),
   and refuses a connection that nothing pinned.
4. `responseheaders` strips an upstream's `X-Egress-Denied`, redacts echoed
   secrets in headers and streams the body (masking them in identity bodies);
   `response` redacts trailers; `response`/`error` write the audit line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from mitmproxy import connection, http, tcp, tls
from mitmproxy.net.http.http1.read import expected_http_body_size

from addons.auditing import Where, address_text, record
from addons.limits import body_follows
from addons.pinning import Pinning
from addons.refusal import refusal_response
from addons.targets import is_transparent, locate_flow, origin_form, upstream_sni
from common.invariant import InvariantError
from proxy.audit import AuditSink
from proxy.config import PatternKind
from proxy.decision import Decision, Reason
from proxy.fields import fields_problem
from proxy.hosts import Host, HostError, IPAddress, canonical_host, parse_authority
from proxy.limits import Limit
from proxy.metrics import ProxyMetrics
from proxy.policy import Policy
from proxy.redact import NO_REDACTION, BodyMatcher, Redactor, refuse_echoing_method
from proxy.resolver import system_resolve
from proxy.targets import Location

log = logging.getLogger("egress")

RESOLVE_TIMEOUT_S = 5.0
# mitmproxy reads a refused request's body before it can answer. Up to this size the
# sandbox gets the readable 403; a larger or unknown-length body closes the connection
# instead, so a refused upload can never make the proxy buffer gigabytes.
REFUSED_BODY_LIMIT = 64 * 1024
DENIED_HEADER = "X-Egress-Denied"
_META = "egress"

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@dataclass
class FlowState:
    """What the addon knows about one request; kept in `flow.metadata`."""

    decision: Decision
    host: str
    started: float = field(default_factory=time.monotonic)
    injected: tuple[str, ...] = ()
    redactions: Redactor = NO_REDACTION
    refused_here: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass
class ClientState:
    # The host and port every request on this connection must name (see module doc).
    target: tuple[Host, int] | None = None
    # Transparent TLS without SNI: only an IP/CIDR entry can open the destination.
    no_sni: bool = False
    # The deciding entry is pass-through: TLS to the target is relayed, not intercepted.
    passthrough: bool = False
    # The ClientHello carried an SNI that does not parse: every request is bad_request (D23).
    bad_sni: bool = False


class EgressPolicy:
    def __init__(
        self,
        policy: Policy,
        metrics: ProxyMetrics,
        audit: AuditSink,
        on_running: Callable[[], None] | None = None,
        resolver: Resolver = system_resolve,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.audit = audit
        self._on_running = on_running
        self._clients: dict[str, ClientState] = {}
        self._resolve = resolver
        self.pinning = Pinning(metrics)
        self.addons = [self.pinning]  # mitmproxy calls a sub-addon's hooks too

    # -- lifecycle -------------------------------------------------------------------

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

    # -- connection targets ---------------------------------------------------------------

    async def http_connect(self, flow: http.HTTPFlow) -> None:
        """Regular mode: decide the CONNECT target; refuse before any tunnel opens."""
        started = time.monotonic()
        host_text = flow.request.host[:255]
        port: int | None = flow.request.port
        policy = self.policy  # one snapshot per hook: a reload never splits a decision
        try:
            try:
                host, port = parse_authority(flow.request.host, flow.request.port)
            except HostError:
                decision = Decision.deny(Reason.BAD_REQUEST)
            else:
                host_text = str(host)
                decision = policy.decide(host, port, tls=None)
                decision = await self._pin(policy, flow.client_conn, decision, host, port)
                if decision.allowed:
                    client = self._client(flow.client_conn)
                    client.target = (host, port)
                    client.passthrough = decision.entry is not None and decision.entry.passthrough
                    # The tunnel's upstream is (host, port) as mitmproxy will connect to it:
                    # the canonical name, which is what the pin is keyed on.
                    flow.request.data.host = str(host)
        except Exception:  # noqa: BLE001 - fail closed, and count it
            log.exception("policy error on CONNECT")
            self.metrics.policy_errors.inc()
            decision = Decision.deny(Reason.POLICY_ERROR)
        self.metrics.requests.labels(decision.verdict, decision.reason.value).inc()
        if not decision.allowed:
            flow.response = refusal_response(decision, host_text)
        status = flow.response.status_code if flow.response else 200
        upstream = (
            self._pinned(flow.client_conn, flow.request.host, port) if decision.allowed else None
        )
        self._audit(flow.client_conn, "CONNECT", "", host_text, port, decision, started, status,
                    upstream=upstream)  # fmt: skip

    async def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        """Record the TLS target; relay (not intercept) what a pass-through entry allows.

        Regular mode: the CONNECT target was decided; a pass-through tunnel whose SNI
        names another host stays intercepted, so its requests meet `host_mismatch`.
        Transparent mode: the SNI names the target (the original destination is not
        trusted); without SNI only an IP/CIDR entry can open the original destination.
        """
        client = data.context.client
        state = self._client(client)
        sni = data.client_hello.sni
        if sni is None and any(kind == 0 for kind, _ in data.client_hello.extensions):
            state.bad_sni = True  # mitmproxy reads an invalid server_name as no SNI at all
            return  # intercepted, so that its requests are refused readably
        try:
            if not is_transparent(client):
                if state.target is None or (sni and canonical_host(sni) != state.target[0]):
                    return  # intercepted; its requests meet host_mismatch
                data.ignore_connection = state.passthrough
                # The target was decided and pinned at the CONNECT (D19).
                data.establish_server_tls_first = not state.passthrough and _upstream_chooses(
                    data.client_hello.alpn_protocols
                )
                return
            address = data.context.server.address
            if address is None:
                return
            if not sni:
                state.target = (canonical_host(address[0]), address[1])
                state.no_sni = True
                return
            state.target = (canonical_host(sni), address[1])
            policy = self.policy  # one snapshot per hook (D24)
            if not await self._relay_if_passthrough(policy, data, state, address):
                await self._upstream_first(policy, data, state)
        except HostError:
            state.bad_sni = True
        except Exception:  # noqa: BLE001 - fail closed: stay intercepted, requests are decided
            log.exception("policy error on TLS ClientHello")
            self.metrics.policy_errors.inc()

    async def _relay_if_passthrough(
        self,
        policy: Policy,
        data: tls.ClientHelloData,
        state: ClientState,
        address: tuple[str, int],
    ) -> bool:
        """Transparent: relay what a pass-through entry allows; True when it was decided."""
        if state.target is None:
            raise InvariantError("a transparent client has a target from its SNI")
        host, port = state.target
        decision = policy.decide(host, port, tls=True)
        if not (decision.allowed and decision.entry is not None and decision.entry.passthrough):
            return False  # intercepted: every request inside is decided, refused readably
        started = time.monotonic()
        decision = await self._pin(policy, data.context.client, decision, host, port)
        self.metrics.requests.labels(decision.verdict, decision.reason.value).inc()
        client = data.context.client
        pinned = self.pinning.pinned(client, (str(host), port))
        if decision.allowed and pinned is not None:
            self.pinning.pin(
                client, address, pinned
            )  # mitmproxy connects to the original destination
            state.passthrough = data.ignore_connection = True
        self._audit(
            data.context.client, "TLS", "https", str(host), port, decision, started, status=None
        )
        return True

    async def _upstream_first(
        self, policy: Policy, data: tls.ClientHelloData, state: ClientState
    ) -> None:
        """Transparent, intercepted: when the SNI's host is allowed, pin it and complete the
        upstream handshake before the client's, so the client gets the upstream's ALPN
        choice (D19). The upstream is the SNI's checked address, never the original
        destination; a refused name opens nothing, and its requests are refused readably.
        """
        if state.target is None:
            raise InvariantError("a transparent client has a target from its SNI")
        if not _upstream_chooses(data.client_hello.alpn_protocols):
            return
        host, port = state.target
        decision = policy.decide(host, port, tls=True)
        decision = await self._pin(policy, data.context.client, decision, host, port)
        if decision.allowed:
            # Keyed like the requests inside, which then reuse this connection.
            data.context.server.address = (str(host), port)
            data.establish_server_tls_first = True

    # -- requests ------------------------------------------------------------------------

    async def requestheaders(self, flow: http.HTTPFlow) -> None:
        state = FlowState(Decision.deny(Reason.POLICY_ERROR), flow.request.host[:255])
        flow.metadata[_META] = state
        try:
            await self._decide_request(self.policy, flow, state)
        except Exception:  # noqa: BLE001 - fail closed, and count it
            log.exception("policy error on request")
            self.metrics.policy_errors.inc()
            state.decision = Decision.deny(Reason.POLICY_ERROR)
            state.injected, state.redactions = (), NO_REDACTION
        self.metrics.requests.labels(state.decision.verdict, state.decision.reason.value).inc()
        if state.decision.allowed:
            flow.request.stream = _counter(state, "bytes_sent")
        else:
            state.refused_here = True
            flow.request.stream = False
            if _body_size(flow.request, body_follows(flow)) > REFUSED_BODY_LIMIT:
                self.metrics.limit_refusals.labels(Limit.REFUSED_BODY.value).inc()
                flow.kill()  # HTTP/2: the stream is reset (D25); the connection stays
                if not (flow.request.is_http2 or flow.request.is_http3):
                    asyncio.get_running_loop().call_soon(_hang_up, flow.client_conn)
            else:
                flow.response = refusal_response(state.decision, state.host, flow.request.method)

    async def _decide_request(self, policy: Policy, flow: http.HTTPFlow, state: FlowState) -> None:
        """Decide with `policy`, the one snapshot this request uses throughout (D24)."""
        request = flow.request
        client = self._client(flow.client_conn)
        if client.no_sni and not self._opened_by_address(policy, client.target):
            state.decision = Decision.deny(Reason.NO_SNI)
            return
        located = self._locate(flow, client)
        if isinstance(located, Decision):
            state.decision = located
            return
        host, port = located.host, located.port
        state.host = str(host)
        decision = policy.decide(host, port, tls=request.scheme == "https")
        decision = refuse_echoing_method(decision, request.method)
        decision = await self._pin(policy, flow.client_conn, decision, host, port)
        state.decision = decision
        if not decision.allowed:
            return
        # From here mitmproxy connects to (host, port) — the pinned address in server_connect —
        # and keys connection reuse on it, so each host gets its own upstream connection.
        request.data.host, request.data.port = str(host), port
        origin_form(request, located)
        upstream_sni(flow, located)
        entry = decision.entry
        if decision.injects and entry is not None and entry.transform:  # never a would_deny
            for transform in entry.transform:
                request.headers[transform.header] = transform.value.reveal()
            state.injected = tuple(t.header for t in entry.transform)
            state.redactions = entry.redactions
            self.metrics.injections.labels(entry.pattern).inc()

    def _locate(self, flow: http.HTTPFlow, client: ClientState) -> Location | Decision:
        located = locate_flow(flow, client.target, client.bad_sni)
        return Decision.deny(located) if isinstance(located, Reason) else located

    async def _pin(
        self, policy: Policy, client: connection.Client, decision: Decision, host: Host, port: int
    ) -> Decision:
        """Resolve an allowed name, keep the first permitted address, and pin it."""
        if not decision.allowed:
            return decision
        if host.ip is not None:
            pinned: IPAddress | None = host.ip
        else:
            if host.name is None:
                raise InvariantError("a Host without an address has a name")
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    addresses = await self._resolve(host.name, port)
            except (OSError, TimeoutError):
                addresses = []
            decision, pinned = policy.pick_address(decision, addresses, port)
        if pinned is not None:
            self.pinning.pin(client, (str(host), port), (str(pinned), port))
        return decision

    def request(self, flow: http.HTTPFlow) -> None:
        """Request trailers arrive after the body streamed, too late for a refusal: a trailer
        block with bytes no upstream may see is dropped, never forwarded (D21)."""
        trailers = flow.request.trailers
        if trailers is not None and fields_problem(trailers.fields) is not None:
            flow.request.trailers = None

    # -- non-HTTP TCP ----------------------------------------------------------------------

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        """Raw TCP only reaches destinations of explicit IP/CIDR entries (SPEC 1.6).

        The destination is the CONNECT target (regular) or the original destination
        (transparent); a named entry never becomes a blind TCP pipe.
        """
        try:
            client = self._client(flow.client_conn)
            destination = client.target
            if is_transparent(flow.client_conn) and flow.server_conn.address:
                address = flow.server_conn.address
                destination = (canonical_host(address[0]), address[1])
            if self._opened_by_address(self.policy, destination) and flow.server_conn.address:
                if destination is None:
                    raise InvariantError("a tunnel opened by address has a destination")
                pinned = (str(destination[0]), destination[1])
                self.pinning.pin(flow.client_conn, flow.server_conn.address, pinned)
                self.metrics.requests.labels("allow", Reason.ALLOWLISTED.value).inc()
                return
        except Exception:  # noqa: BLE001 - fail closed
            log.exception("policy error on raw TCP")
            self.metrics.policy_errors.inc()
        self.metrics.requests.labels("deny", Reason.NOT_ALLOWLISTED.value).inc()
        # mitmproxy's TCP layer ignores a kill from tcp_start and relays anyway, to the
        # address the CONNECT pinned: unpin, so that the upstream connection is refused
        # (the TCP layer then closes the client).
        self.pinning.forget(flow.client_conn)
        flow.kill()

    def _opened_by_address(self, policy: Policy, destination: tuple[Host, int] | None) -> bool:
        """An IP destination allowed by an explicit IP/CIDR entry (not by `*`)."""
        if destination is None or destination[0].ip is None:
            return False
        decision = policy.decide(destination[0], destination[1], tls=None)
        return (
            decision.allowed
            and decision.entry is not None
            and decision.entry.kind is PatternKind.ADDRESS
        )

    # -- responses -----------------------------------------------------------------------------

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state: FlowState | None = flow.metadata.get(_META)
        if state is None or state.refused_here or flow.response is None:
            return
        try:
            headers = flow.response.headers
            headers.pop(DENIED_HEADER, None)
            count = _counter(state, "bytes_received")
            flow.response.stream = count
            if state.redactions:  # only what this request carried can be echoed back
                redactor = state.redactions
                headers.fields = tuple((n, redactor.header(v)) for n, v in headers.fields)
                if headers.get("content-encoding", "identity").strip().lower() == "identity":
                    flow.response.stream = _scrubbed(count, redactor.body())  # not compressed (D32)
        except Exception:  # noqa: BLE001 - never forward what could not be cleaned
            log.exception("policy error on response headers")
            self.metrics.policy_errors.inc()
            flow.kill()

    def response(self, flow: http.HTTPFlow) -> None:
        # Trailers are sent after this hook (HTTP/2; mitmproxy drops HTTP/1 ones).
        state: FlowState | None = flow.metadata.get(_META)
        trailers = flow.response.trailers if flow.response else None
        if state is not None and state.redactions and trailers:
            try:
                trailers.fields = tuple((n, state.redactions.header(v)) for n, v in trailers.fields)
            except Exception:  # noqa: BLE001 - never forward what could not be cleaned
                log.exception("policy error on response trailers")
                self.metrics.policy_errors.inc()
                flow.kill()
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
        request = flow.request
        self._audit(
            flow.client_conn,
            request.method,
            request.scheme,
            state.host,
            request.port,
            state.decision,
            state.started,
            flow.response.status_code if flow.response else None,
            state.bytes_sent,
            state.bytes_received,
            state.injected,
            upstream=address_text(flow.server_conn.peername)
            or self._pinned(flow.client_conn, request.host, request.port),
        )

    def _pinned(self, client: connection.Client, host: str, port: int | None) -> str | None:
        """The checked address a destination is pinned to, as `ip:port`."""
        if port is None:
            return None
        return address_text(self.pinning.pinned(client, (host, port)))

    def _audit(
        self,
        client: connection.Client,
        method: str,
        scheme: str,
        host: str,
        port: int | None,
        decision: Decision,
        started: float,
        status: int | None,
        sent: int = 0,
        received: int = 0,
        injected: tuple[str, ...] = (),
        upstream: str | None = None,
    ) -> None:
        where = Where(client, method, scheme, host, port, upstream)
        self.audit.write(record(where, decision, started, status, sent, received, injected))


def _upstream_chooses(offers: list[bytes]) -> bool:
    """Whether the upstream's ALPN choice matters: the client offers HTTP/2 and something
    else (D19). With one offer there is nothing to choose, and no early upstream handshake."""
    return b"h2" in offers and len(offers) > 1


def _counter(state: FlowState, attribute: str) -> Callable[[bytes], bytes]:
    """A mitmproxy stream callable that passes chunks through and counts their bytes."""

    def count(chunk: bytes) -> bytes:
        setattr(state, attribute, getattr(state, attribute) + len(chunk))
        return chunk

    return count


def _scrubbed(
    count: Callable[[bytes], bytes], scrub: BodyMatcher
) -> Callable[[bytes], Iterable[bytes] | bytes]:
    """Count what the upstream sent, forward it with the injected secrets masked."""
    return lambda chunk: scrub(count(chunk))


def _body_size(request: http.Request, follows: bool) -> int:
    """The request body's announced size; unknown counts as unbounded: chunked, invalid,
    or an HTTP/2 stream its head left open without a content-length (D25)."""
    if not follows:
        return 0
    if (request.is_http2 or request.is_http3) and "content-length" not in request.headers:
        return REFUSED_BODY_LIMIT + 1
    try:
        size = expected_http_body_size(request)
    except ValueError:
        return REFUSED_BODY_LIMIT + 1
    return REFUSED_BODY_LIMIT + 1 if size is None or size < 0 else size


def _hang_up(client: connection.Client) -> None:
    """Close a killed client's socket.

    When body bytes arrive while mitmproxy handles a kill, it cancels its own reader
    inside `server_event`, and the `writer.close()` after its read loop is skipped (it
    is not in a `finally`): the socket would stay open, unread, until the sandbox gave
    up. This reaches into mitmproxy's connection table; if that ever changes shape,
    nothing happens and the flow is still killed.
    """
    from mitmproxy import ctx

    try:
        server = ctx.master.addons.get("proxyserver")
        handler = server.connections.get(client.id) if server else None
        io = handler.transports.get(handler.client) if handler else None
        if io is not None and io.writer is not None:
            io.writer.transport.abort()
    except (AttributeError, LookupError, RuntimeError):
        log.debug("could not hang up a killed client connection", exc_info=True)
