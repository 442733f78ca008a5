"""One pure decision per connection stage: CONNECT, TLS ClientHello, raw TCP, request.

The mitmproxy adapter (`addons/`) turns a hook's flow into the plain values below, calls
the stage's one function, and applies the answer. Every connection-level rule lives here,
next to its table of named cases (tests/proxy/test_stages.py):

* CONNECT (`decide_connect`): the authority is decided and its address pinned; an allowed
  tunnel's target is what every request inside must name (domain fronting, D20).
* ClientHello (`decide_clienthello`): relay or intercept. Regular mode relays a
  pass-through tunnel only when the SNI names its target. Transparent mode takes the
  target from the SNI (the original destination is not trusted), relays a pass-through
  entry to the SNI's checked address, and without SNI marks the connection `no_sni`.
  A sandbox's tunnel is relayed only when its node's entry relays it too (`proxy.tenancy.ceiling`).
* raw TCP (`decide_tcp`): only to destinations of explicit IP/CIDR entries.
* request (`decide_request`): the `no_sni` gate, head bytes (D21), where it goes, the
  policy, TRACE (D31), rules (`decide_rules`), placeholders, SigV4 scope, the address.

Invariants: a function reads the one `Policy` snapshot it is given (D24); a name is
resolved only once allowed, and only an address `Policy.pick_address` checked is pinned;
every path that is not an explicit allow is a refusal (at the ClientHello: interception).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy.clauses import Head, Phase, heads
from sandbox_egress.proxy.clauses.git import PushItem
from sandbox_egress.proxy.clauses.sigv4 import Signing
from sandbox_egress.proxy.config.loader import Transform
from sandbox_egress.proxy.decision import Decision, Reason
from sandbox_egress.proxy.fields import head_problem
from sandbox_egress.proxy.hosts import Host, HostError, IPAddress, canonical_host, parse_authority
from sandbox_egress.proxy.mcp import McpPolicy
from sandbox_egress.proxy.policy import Policy, refuse_echoing_method
from sandbox_egress.proxy.resolver import Resolve
from sandbox_egress.proxy.targets import Location, RequestNames, locate
from sandbox_egress.proxy.tenancy.ceiling import node_requires, raw_tcp, relays
from sandbox_egress.proxy.values.redact import NO_REDACTION, Redactor
from sandbox_egress.proxy.values.swap import swap

RESOLVE_TIMEOUT_S = 5.0

Address = tuple[str, int]  # (host or ip text, port), as mitmproxy names a destination


@dataclass(frozen=True, slots=True)
class ConnectionFacts:
    """What the stages learned about one client connection (kept by the adapter)."""

    # The host and port every request on this connection must name, once known.
    target: tuple[Host, int] | None = None
    # Transparent TLS without SNI: only an IP/CIDR entry can open the destination.
    no_sni: bool = False
    # The deciding entry is pass-through: TLS to the target is relayed, not intercepted.
    passthrough: bool = False
    # The ClientHello carried an SNI that does not parse: every request is bad_request (D23).
    bad_sni: bool = False
    # A node proxy's sandbox (1.12), once identified: whose policy decides (`Tenancy`).
    sandbox: str | None = None


@dataclass(frozen=True, slots=True)
class Pin:
    """An upstream connection to `destination` must go to the checked `address`."""

    destination: Address
    address: Address


async def admit(
    policy: Policy, decision: Decision, host: Host, port: int, resolve: Resolve
) -> tuple[Decision, IPAddress | None]:
    """The address stage: resolve an allowed name and keep the first permitted address.

    A refusal is returned as it is, without a lookup; an IP host is its own address.
    """
    if not decision.allowed:
        return decision, None
    if host.ip is not None:
        return decision, host.ip
    if host.name is None:
        raise InvariantError("a Host without an address has a name")
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            addresses = await resolve(host.name, port)
    except (OSError, TimeoutError):
        addresses = []
    return policy.pick_address(decision, addresses, port)


def _pin(host: Host, port: int, address: IPAddress) -> Pin:
    return Pin((str(host), port), (str(address), port))


# -- CONNECT --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectAnswer:
    decision: Decision
    host: str  # as the refusal and the audit line name it: canonical once it parsed
    port: int | None
    facts: ConnectionFacts
    pin: Pin | None = None  # allowed: the tunnel's (canonical) destination and its address


async def decide_connect(
    policy: Policy, resolve: Resolve, facts: ConnectionFacts, host: str, port: int | None
) -> ConnectAnswer:
    """Regular mode: decide the CONNECT authority before any tunnel opens."""
    try:
        target, target_port = parse_authority(host, port)
    except HostError:
        return ConnectAnswer(Decision.deny(Reason.BAD_REQUEST), host[:255], port, facts)
    decision = policy.decide(target, target_port, tls=None)
    decision, address = await admit(policy, decision, target, target_port, resolve)
    if address is None:
        return ConnectAnswer(decision, str(target), target_port, facts)
    passthrough = relays(policy, decision)  # a sandbox's: only what its node relays too
    facts = replace(facts, target=(target, target_port), passthrough=passthrough)
    return ConnectAnswer(
        decision, str(target), target_port, facts, _pin(target, target_port, address)
    )


# -- TLS ClientHello --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello:
    transparent: bool
    sni: str | None
    # A server_name extension was sent: mitmproxy reads an invalid one as no SNI at all.
    sni_sent: bool
    alpn: tuple[bytes, ...]
    destination: Address | None  # transparent: the original destination


@dataclass(frozen=True, slots=True)
class HelloAnswer:
    facts: ConnectionFacts
    relay: bool = False  # relay the TLS bytes untouched (a pass-through entry)
    upstream_first: bool = False  # complete the upstream handshake first (ALPN, D19)
    server_address: Address | None = None  # transparent, upstream first: the SNI's name
    pins: tuple[Pin, ...] = ()
    # Decided here (a transparent pass-through), so counted and audited at this stage;
    # otherwise None: the connection is intercepted and each request inside is decided.
    decision: Decision | None = None


def upstream_chooses(offers: tuple[bytes, ...]) -> bool:
    """Whether the upstream's ALPN choice matters: the client offers HTTP/2 and something
    else (D19). With one offer there is nothing to choose, and no early upstream handshake."""
    return b"h2" in offers and len(offers) > 1


def http3_name(name: bytes) -> bool:
    """An ALPN name of HTTP/3 (`h3`, a draft's `h3-NN`: mitmproxy's `is_h3_alpn`). Only
    QUIC carries HTTP/3: inside a TCP connection such a name is never chosen nor sent on
    (D305), or mitmproxy's HTTP layer would run the connection through HTTP/3's layers."""
    return name == b"h3" or name.startswith(b"h3-")


def upstream_offers(client_offers: tuple[bytes, ...], http2: bool = True) -> tuple[bytes, ...]:
    """The ALPN list offered upstream on an intercepted connection: the client's, without
    HTTP/3's names (D305) and, with HTTP/2 off, without `h2`; plus `http/1.1` when it
    offers `h2` without it (D82) — the proxy speaks HTTP/2 to the client and HTTP/1.1 to
    an upstream that has no HTTP/2 — or when only HTTP/3's names were offered (the
    client then speaks HTTP/1.1 without ALPN)."""
    offers = tuple(o for o in client_offers if not http3_name(o) and (http2 or o != b"h2"))
    if http2 and b"h2" in offers and b"http/1.1" not in offers:
        return (*offers, b"http/1.1")
    if not offers and any(http3_name(o) for o in client_offers):
        return (b"http/1.1",)
    return offers


async def decide_clienthello(
    policy: Policy, resolve: Resolve, facts: ConnectionFacts, hello: Hello
) -> HelloAnswer:
    """Relay or intercept, and what the connection's requests must name."""
    if hello.sni is None and hello.sni_sent:
        return HelloAnswer(replace(facts, bad_sni=True))  # intercepted: refused readably
    try:
        if not hello.transparent:
            return _tunnel_hello(facts, hello)
        return await _transparent_hello(policy, resolve, facts, hello)
    except HostError:
        return HelloAnswer(replace(facts, bad_sni=True))


def _tunnel_hello(facts: ConnectionFacts, hello: Hello) -> HelloAnswer:
    """Regular mode: the CONNECT target was decided and pinned (D19). A pass-through
    tunnel whose SNI names another host stays intercepted: its requests meet host_mismatch."""
    target = facts.target
    if target is None or (hello.sni and canonical_host(hello.sni) != target[0]):
        return HelloAnswer(facts)
    if facts.passthrough:
        return HelloAnswer(facts, relay=True)
    return HelloAnswer(facts, upstream_first=upstream_chooses(hello.alpn))


async def _transparent_hello(
    policy: Policy, resolve: Resolve, facts: ConnectionFacts, hello: Hello
) -> HelloAnswer:
    """Transparent mode: the SNI names the target; without one, the original destination
    does, and only an IP/CIDR entry can open it (the request stage's `no_sni` gate).

    A pass-through entry is relayed to the SNI's checked address. An intercepted allowed
    name whose client offers a choice of ALPN is connected first (D19), to the SNI's name,
    never the original destination; a refused name opens nothing.
    """
    destination = hello.destination
    if destination is None:
        return HelloAnswer(facts)
    if not hello.sni:
        target = (canonical_host(destination[0]), destination[1])
        return HelloAnswer(replace(facts, target=target, no_sni=True))
    host, port = canonical_host(hello.sni), destination[1]
    facts = replace(facts, target=(host, port))
    decision = policy.decide(host, port, tls=True)
    passthrough = relays(policy, decision)
    if not passthrough and not upstream_chooses(hello.alpn):
        return HelloAnswer(facts)
    decision, address = await admit(policy, decision, host, port, resolve)
    if passthrough:
        if address is None:  # refused at the address stage: intercepted, refused readably
            return HelloAnswer(facts, decision=decision)
        checked = _pin(host, port, address)
        # mitmproxy connects a relayed connection to the original destination.
        pins = (checked, Pin(destination, checked.address))
        return HelloAnswer(
            replace(facts, passthrough=True), relay=True, pins=pins, decision=decision
        )
    if address is None:
        return HelloAnswer(facts)
    # Keyed like the requests inside, which then reuse this upstream connection.
    checked = _pin(host, port, address)
    return HelloAnswer(
        facts, upstream_first=True, server_address=checked.destination, pins=(checked,)
    )


# -- raw TCP ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TcpAnswer:
    decision: Decision
    pin: Pin | None = None  # allowed: the upstream connection goes to this address


def decide_tcp(
    policy: Policy, facts: ConnectionFacts, transparent: bool, destination: Address | None
) -> TcpAnswer:
    """Raw TCP only reaches destinations of explicit IP/CIDR entries (not `*`) that judge
    nothing per request, a sandbox's node's entry too (`proxy.ceiling.raw_tcp`).

    The destination is the CONNECT target (regular) or the original destination
    (transparent); a named entry never becomes a blind TCP pipe. `destination` is the
    address mitmproxy will connect to.
    """
    refused = TcpAnswer(Decision.deny(Reason.NOT_ALLOWLISTED))
    target = facts.target
    if transparent and destination is not None:
        target = (canonical_host(destination[0]), destination[1])
    if destination is None or target is None or target[0].ip is None:
        return refused
    decision = raw_tcp(policy, policy.decide(target[0], target[1], tls=None))
    if not decision.allowed:
        return TcpAnswer(decision)
    return TcpAnswer(decision, Pin(destination, (str(target[0]), target[1])))


# -- requests -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestAsk:
    method: bytes  # as received, for the head check
    fields: tuple[tuple[bytes, bytes], ...]  # the header fields as received
    names: RequestNames  # every name the request carries (target: the connection's)
    https: bool


@dataclass(frozen=True, slots=True)
class RequestAnswer:
    decision: Decision
    host: str  # as the refusal and the audit line name it: the decided host once located
    location: Location | None = None  # allowed: where the request goes, in origin-form
    pin: Pin | None = None
    transforms: tuple[Transform, ...] = ()  # headers to write: a real allow only
    redactions: Redactor = NO_REDACTION  # what the answer may echo of them
    # Placeholders swapped (proxy.swap): fields to send (None: as received), where values went.
    fields: tuple[tuple[bytes, bytes], ...] | None = None
    swapped: tuple[str, ...] = ()
    # Each clause's part for its adapter (`proxy.clauses`: a head rule's `Ruling.part`).
    parts: Mapping[str, object] = field(default_factory=dict)

    @property
    def push(self) -> tuple[PushItem, ...]:  # a push allowed by repository: refs to match
        return cast("tuple[PushItem, ...]", self.parts.get("rules", ()))

    @property
    def mcp(self) -> tuple[McpPolicy, ...]:  # an MCP entry's policies (addons/clauses/mcp.py)
        return cast("tuple[McpPolicy, ...]", self.parts.get("mcp", ()))

    @property
    def sigv4(self) -> Signing | None:  # re-signed last, with the entry's aws keys
        return cast("Signing | None", self.parts.get("sigv4"))

    @property
    def credentials(self) -> tuple[str, ...]:  # fetched and written last
        return cast("tuple[str, ...]", self.parts.get("credentials", ()))


async def decide_request(
    policy: Policy, resolve: Resolve, facts: ConnectionFacts, ask: RequestAsk
) -> RequestAnswer:
    """Decide one request (each one on a kept-alive connection or HTTP/2 stream): the
    core's checks, each clause's head rule at its phase (`proxy.clauses`), the address."""
    host = ask.names.host[:255]
    if facts.no_sni and not policy.opened_by_address(facts.target):
        return RequestAnswer(Decision.deny(Reason.NO_SNI), host)
    if head_problem(ask.method, ask.fields) is not None:
        return RequestAnswer(Decision.deny(Reason.BAD_REQUEST), host)  # D21
    located = locate(ask.names)
    if isinstance(located, Reason):
        return RequestAnswer(Decision.deny(located), host)
    host = str(located.host)
    decision = policy.decide(located.host, located.port, tls=ask.https)
    decision = refuse_echoing_method(decision, ask.names.method)
    parts: dict[str, object] = {}
    head = Head(policy, decision, located, ask.names.method, ask.fields, ask.https, host)
    decision = _heads(Phase.POLICY, head, parts)
    own = policy.holder(decision.entry)
    swapped = swap(policy.placeholders(), decision, ask.fields, located.path, own, host)
    if swapped.reason is not None:  # before any lookup: nothing of it goes anywhere
        return RequestAnswer(Decision.deny(swapped.reason, decision.entry), host)
    entry = decision.entry
    written = bool(swapped.injected) or bool(entry and (entry.transform or entry.credential))
    decision = node_requires(policy, decision, written)
    signed = _heads(Phase.SIGNED, head.deciding(decision), parts)  # before budgets
    if not signed.allowed and decision.allowed:
        return RequestAnswer(signed, host)
    decision, address = await admit(policy, decision, located.host, located.port, resolve)
    if address is None:
        return RequestAnswer(decision, host)
    pin = _pin(located.host, located.port, address)
    entry = decision.entry
    if swapped.path is not None:
        located = replace(located, path=swapped.path)
    decision = _heads(Phase.ALLOWED, head.deciding(decision), parts)
    transforms = entry.transform if decision.injects and entry is not None else ()
    if not (transforms or swapped.injected or parts.get("credentials")) or entry is None:
        return RequestAnswer(decision, host, located, pin, parts=parts)  # no would_deny
    return RequestAnswer(
        decision,
        host,
        located,
        pin,
        transforms,
        entry.redactions.spelled(swapped.spellings),
        fields=swapped.fields,
        swapped=swapped.injected,
        parts=parts,
    )


def _heads(phase: Phase, head: Head, parts: dict[str, object]) -> Decision:
    """The head rules of `phase`, in table order, each reading the decision the one
    before it made; their parts kept by clause name."""
    for clause in heads(phase):
        if clause.head is None:
            continue
        ruling = clause.head(head)
        head = head.deciding(ruling.decision)
        if ruling.part is not None:
            parts[clause.name] = ruling.part
    return head.decision
