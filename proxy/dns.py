"""A DNS responder for transparent sandboxes: answers only names the allowlist could allow.

A sandbox behind a transparent gateway still needs names resolved, and an ordinary
resolver is a channel out: every query name reaches the Internet (`<data>.evil.test`).
`egress-proxy dns` answers instead of a resolver:

* a name that some allowlist entry could allow (exact, wildcard or `*`; never a loopback
  or metadata name) is resolved with the system resolver, as the proxy itself resolves,
  and its A/AAAA records are returned with a short TTL; other query types for such a
  name get an empty answer;
* every other name is answered REFUSED and never resolved, so its name goes nowhere.

The proxy decides again, on the SNI/Host, when the sandbox connects: the responder only
closes the side channel, it grants nothing. With `*` in the allowlist every name can be
allowed, and every name is resolved: the leak is then the operator's choice.

Parsing and building messages is dnspython's; a datagram that does not parse is dropped
and counted, and nothing here raises into the event loop. The configuration is reloaded
on SIGHUP like the proxy's, without its secrets: transform references are checked but
never looked up, so the responder holds no credential (docs/decisions.md D83).
Lookups are shared fairly between clients (`proxy.fairness`, keyed by the client's
address): a client asking for names whose server never answers ties up its own share
of the resolver, and another client's names are still answered (issue 21).
Metrics: `egress_dns_queries_total{result}`, `egress_dns_resolve_seconds` and
`egress_bound_hits_total{bound,outcome}`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from prometheus_client import CollectorRegistry, Counter, Histogram

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy import config as configuration
from sandbox_egress.proxy import sandboxes
from sandbox_egress.proxy.config import NetworkConfig, PatternKind
from sandbox_egress.proxy.fairness import Bound, ClientKey, Fairness, FairShare, Slots, client_key
from sandbox_egress.proxy.hosts import HostError, IPAddress, canonical_name
from sandbox_egress.proxy.policy import LOOPBACK_NAMES, METADATA_NAMES, Policy
from sandbox_egress.proxy.resolver import FairResolver
from sandbox_egress.proxy.tenancy import Tenancy

log = logging.getLogger("egress.dns")

TTL_S = 5
RESOLVE_TIMEOUT_S = 5.0
MAX_TCP_MESSAGE = 65535
RESULTS = ("answered", "refused", "failed", "malformed")
# TCP connections at once, all clients and one client; each lives 10 s without a query.
TCP_CONNECTIONS = FairShare(256, 16)
ANY_CLIENT = ClientKey("")  # a query whose sender is not known shares one key
DEFAULT_FAIRNESS = Fairness()

Resolve = Callable[[str, int], Awaitable[list[IPAddress]]]


class DnsMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.queries = Counter(
            "egress_dns_queries_total",
            "DNS queries by result: answered (an allowable name), refused (a name no entry "
            "could allow), failed (the resolver failed), malformed (not a DNS query).",
            ["result"],
            registry=self.registry,
        )
        self.resolve = Histogram(
            "egress_dns_resolve_seconds",
            "Time the system resolver took for an allowable name.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=self.registry,
        )
        self.bound_hits = Counter(
            "egress_bound_hits_total",
            "Times a fair-share bound bit, by bound and outcome (waited or refused).",
            ["bound", "outcome"],
            registry=self.registry,
        )
        for result in RESULTS:
            self.queries.labels(result)
        for bound in (
            Bound.DNS_CLIENT,
            Bound.DNS_TOTAL,
            Bound.CONNECTIONS_CLIENT,
            Bound.CONNECTIONS_TOTAL,
        ):
            for outcome in ("waited", "refused"):
                self.bound_hits.labels(bound.value, outcome)

    def hit(self, outcome: str) -> Callable[[Bound], None]:
        return lambda bound: self.bound_hits.labels(bound.value, outcome).inc()


def allowable(policy: Policy, qname: dns.name.Name) -> str | None:
    """The canonical name when some entry could allow it, else None."""
    try:
        name = canonical_name(qname.to_text(omit_final_dot=True))
    except (HostError, dns.exception.DNSException):
        return None
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return None
    entry = policy.entry_for_name(name)
    if entry is None or (name in METADATA_NAMES and entry.kind is not PatternKind.EXACT):
        return None  # the same name rules as Policy.decide
    return name


class Responder:
    """Turns one query (wire bytes) into one answer (wire bytes), or None to drop it."""

    def __init__(
        self, policy: Policy, resolve: Resolve | FairResolver, metrics: DnsMetrics
    ) -> None:
        self.policy = policy
        # A node file's sandboxes (docs/configuration.md#sandboxes): a client address
        # no sandbox claims is refused every name; a claimed one gets its sandbox's names.
        self.tenancy: Tenancy | None = None
        self._resolve = resolve
        self.metrics = metrics

    async def answer(self, wire: bytes, client: IPAddress | None = None) -> bytes | None:
        """The answer to one query from `client` (a node's sandboxes are told apart by it)."""
        try:
            query = dns.message.from_wire(wire)
        except dns.exception.DNSException:
            self.metrics.queries.labels("malformed").inc()
            return None
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        if query.opcode() != 0 or len(query.question) != 1:
            response.set_rcode(dns.rcode.NOTIMP if query.opcode() != 0 else dns.rcode.FORMERR)
            self.metrics.queries.labels("malformed").inc()
            return response.to_wire()
        question = query.question[0]
        policy, tenancy = self.policy, self.tenancy  # one snapshot per query
        name = allowable(policy, question.name)
        if name is not None and tenancy is not None:  # and the client's sandbox's own
            claimant = tenancy.claimant(client) if client is not None else None
            if allowable(tenancy.policy(claimant), question.name) is None:
                name = None
        if name is None or question.rdclass != dns.rdataclass.IN:
            response.set_rcode(dns.rcode.REFUSED)
            self.metrics.queries.labels("refused").inc()
            return response.to_wire()
        if question.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            started = time.monotonic()
            try:
                async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                    addresses = await self._resolver(_key(client))(name, 443)
            except (OSError, TimeoutError):
                response.set_rcode(dns.rcode.SERVFAIL)
                self.metrics.queries.labels("failed").inc()
                return response.to_wire()
            finally:
                self.metrics.resolve.observe(time.monotonic() - started)
            version = 4 if question.rdtype == dns.rdatatype.A else 6
            texts = [str(a) for a in addresses if a.version == version]
            if texts:
                response.answer.append(
                    dns.rrset.from_text_list(question.name, TTL_S, "IN", question.rdtype, texts)
                )
        self.metrics.queries.labels("answered").inc()
        return response.to_wire()

    def _resolver(self, client: ClientKey) -> Resolve:
        if isinstance(self._resolve, FairResolver):
            return self._resolve.for_client(client)
        return self._resolve

    def reload(self, config: NetworkConfig) -> None:
        self.policy = Policy(config)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.DatagramTransport):
            raise InvariantError("a datagram endpoint gets a datagram transport")
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        task = asyncio.get_running_loop().create_task(self._reply(data, addr))
        self.pending.add(task)  # owned here; removed when done, cancelled at close
        task.add_done_callback(self.pending.discard)

    async def _reply(self, data: bytes, addr: tuple[str, int]) -> None:
        wire = await self.responder.answer(data, _client(addr))
        if wire is not None and self.transport is not None:
            self.transport.sendto(wire, addr)


def _key(client: IPAddress | None) -> ClientKey:
    """The client's fair share (`proxy.fairness.client_key`); an unknown sender shares one."""
    return ANY_CLIENT if client is None else client_key(str(client))


def _client(peer: object) -> IPAddress | None:
    if not isinstance(peer, tuple) or not peer:
        return None
    try:
        return ipaddress.ip_address(str(peer[0]).partition("%")[0])
    except ValueError:
        return None


async def _tcp(
    responder: Responder,
    slots: Slots,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    client = _client(writer.get_extra_info("peername"))
    key = _key(client)
    bound = slots.try_acquire(key)
    if bound is not None:  # one client's connections cannot take every descriptor
        responder.metrics.hit("refused")(bound)
        writer.close()
        return
    try:
        while True:
            async with asyncio.timeout(10):
                length = int.from_bytes(await reader.readexactly(2), "big")
                wire = await reader.readexactly(length)
            answer = await responder.answer(wire, client)
            if answer is None:
                return
            writer.write(len(answer).to_bytes(2, "big") + answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, TimeoutError, OSError):
        pass
    finally:
        slots.release(key)
        writer.close()


async def serve(
    responder: Responder,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Answer on UDP and TCP at (host, port) until `stop` is set."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: _Udp(responder), local_addr=(host, port), family=family
    )
    slots = Slots(TCP_CONNECTIONS, Bound.CONNECTIONS_CLIENT, Bound.CONNECTIONS_TOTAL)
    server = await asyncio.start_server(
        lambda r, w: _tcp(responder, slots, r, w), host, port, family=family
    )
    log.warning("egress-proxy dns: answering on %s:%d (UDP and TCP)", host, port)
    on_ready()
    try:
        await stop.wait()
    finally:
        server.close()
        transport.close()
        for task in list(protocol.pending):
            task.cancel()


async def run(
    config_path: str,
    listen: tuple[str, int],
    metrics_at: tuple[str, int],
    fairness: Fairness = DEFAULT_FAIRNESS,
) -> int:
    """`egress-proxy dns`: serve until SIGTERM/SIGINT; SIGHUP reloads the allowlist."""
    from sandbox_egress.common.serve import MetricsServer, add_build_info
    from sandbox_egress.proxy import resolver

    # secrets=False: the responder needs the domains only, never a credential (D83).
    network = configuration.load(config_path, secrets=False)  # ConfigError goes to the CLI
    metrics = DnsMetrics()
    add_build_info(metrics.registry, "egress")
    share = fairness.dns
    cache = resolver.CachingResolver(
        resolver.threaded_resolve(share.total), max_age=TTL_S, negative_age=TTL_S
    )
    slots = Slots(share, Bound.DNS_CLIENT, Bound.DNS_TOTAL, metrics.hit("waited"))
    fair = FairResolver(cache, slots, cache, metrics.hit("refused"))
    responder = Responder(Policy(network), fair, metrics)
    section = sandboxes.node_section(config_path)
    directory = None
    if section is not None:
        directory = sandboxes.SandboxDirectory(section.directory, section.secrets, secrets=False)
        responder.tenancy = Tenancy(section, responder.policy)
        _rescan(responder, directory)
    server = MetricsServer(metrics_at, metrics.registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def reload() -> None:
        try:
            responder.reload(configuration.load(config_path, secrets=False))
        except configuration.ConfigError as exc:
            for problem in exc.problems:
                log.error("dns: reload refused, keeping the running allowlist: %s", problem)
            return
        if directory is not None:
            _rescan(responder, directory)
        log.warning("dns: allowlist reloaded")

    loop.add_signal_handler(signal.SIGHUP, reload)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server.start()
    try:
        await serve(responder, *listen, stop, on_ready=server.ready.set)
    finally:
        server.stop()
    return 0


def _rescan(responder: Responder, directory: sandboxes.SandboxDirectory) -> None:
    """The sandbox files again (at start and on SIGHUP), inside the node's current policy."""
    found = directory.scan()
    for problem in found.problems:
        log.error("dns: sandbox file refused, keeping its last good names: %s", problem)
    tenancy = responder.tenancy
    if tenancy is not None:
        everything = frozenset(directory.sandboxes)
        responder.tenancy = tenancy.rebuilt(directory.sandboxes, responder.policy, everything)
