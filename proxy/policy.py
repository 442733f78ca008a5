"""The egress policy: which entry decides for a destination, and whether it may be reached.

`Policy` indexes a `NetworkConfig` once so that deciding a host never scans the
allowlist: an exact name is one dict lookup, a wildcard is one lookup per label
of the host (at most 127), an address is one lookup per distinct prefix length
present in the allowlist (at most 33 + 129). The cost is the same with 10 or
10,000 entries.

Two stages, both pure:
* `decide(host, port, tls=...)` — the name stage, on what the client asked for;
* `pick_address(decision, addresses, port)` — the address stage, on what the
  resolver answered. It returns the first checked address, which the caller
  must connect to (pinning: no second lookup).

Invariant: every path that is not an explicit allow returns a refusal. The proxy's
own endpoints are refused in every spelling (`proxy.selfaddr`), and so is any other
address of this host unless a single-address entry (/32, /128) names it (D22).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.proxy.addresses import NEVER_ALLOWED, AddressClass, classify, embedded_ipv4
from sandbox_egress.proxy.config.loader import Entry, NetworkConfig, PatternKind
from sandbox_egress.proxy.decision import REPORTABLE, Decision, Reason
from sandbox_egress.proxy.hosts import Host, IPAddress
from sandbox_egress.proxy.values.placeholders import Holder, PlaceholderIndex

# Methods whose response is the request itself (RFC 9110 9.3.8; TRACK is IIS's spelling).
ECHOING_METHODS = frozenset({"TRACE", "TRACK"})

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})
# Decisions of names a policy remembers (`Policy.decide`); a full cache starts again.
DECIDED_ENTRIES = 256
# A bind to these succeeds on Linux, yet they are no address of the host (issue 21).
NOT_HOST_ADDRESSES = frozenset({AddressClass.BROADCAST, AddressClass.MULTICAST})


class Policy:
    def __init__(
        self,
        config: NetworkConfig,
        self_addresses: Container[tuple[IPAddress, int]] = frozenset(),
        is_local: Callable[[IPAddress], bool] | None = None,
    ) -> None:
        self.config = config
        self._exact: dict[str, Entry] = {}
        self._wildcard: dict[str, Entry] = {}
        self._any: Entry | None = None
        # Per IP version: prefix length -> (address >> host bits) -> entry.
        self._networks: dict[int, dict[int, dict[int, Entry]]] = {4: {}, 6: {}}
        for entry in config.allowlist:
            if entry.kind is PatternKind.ANY:
                self._any = entry
            elif entry.kind in (PatternKind.EXACT, PatternKind.WILDCARD):
                if entry.name is None:
                    raise InvariantError("an exact or wildcard entry has a name")
                table = self._exact if entry.kind is PatternKind.EXACT else self._wildcard
                table[entry.name] = entry
            else:
                if entry.network is None:
                    raise InvariantError("an address entry has a network")
                network = entry.network
                shift = network.max_prefixlen - network.prefixlen
                by_length = self._networks[network.version].setdefault(network.prefixlen, {})
                by_length[int(network.network_address) >> shift] = entry
        self._lengths = {
            version: sorted(by_length, reverse=True)
            for version, by_length in self._networks.items()
        }
        self._self_addresses = self_addresses
        self._is_local = is_local
        # (name, port, tls) -> the decision: `decide` of a name reads this snapshot alone,
        # and each kept-alive request asks it again (issue 36). A reload builds a new
        # policy, so a cache never outlives what it was computed from. An IP host is
        # never remembered: `_is_self` asks the host's addresses, which change.
        self._decided: dict[tuple[str, int, bool | None], Decision] = {}

    # -- lookups -------------------------------------------------------------

    def entry_for_name(self, name: str) -> Entry | None:
        """Most specific entry for a canonical name: exact, longest wildcard, then `*`."""
        entry = self._exact.get(name)
        if entry is not None:
            return entry
        if self._wildcard:
            dot = name.find(".")
            while dot != -1:
                entry = self._wildcard.get(name[dot + 1 :])
                if entry is not None:
                    return entry
                dot = name.find(".", dot + 1)
        return self._any

    def entry_for_address(self, ip: IPAddress) -> Entry | None:
        """Longest-prefix IP/CIDR entry for the address, or for the IPv4 it carries.

        An IPv6 address carrying IPv4 (mapped, NAT64, 6to4, Teredo) is opened
        through its IPv4 only when every non-public one it carries is covered: a
        Teredo address names two, and opening the server must not open the client.
        """
        entry = self._longest_prefix(ip)
        if entry is not None or ip.version == 4:
            return entry
        internal = [v4 for v4 in embedded_ipv4(ip) if classify(v4) is not AddressClass.PUBLIC]
        entries = [self._longest_prefix(v4) for v4 in internal]
        if entries and all(e is not None for e in entries):
            return entries[0]
        return None

    def _longest_prefix(self, ip: IPAddress) -> Entry | None:
        networks = self._networks[ip.version]
        value, bits = int(ip), ip.max_prefixlen
        for length in self._lengths[ip.version]:
            entry = networks[length].get(value >> (bits - length))
            if entry is not None:
                return entry
        return None

    # -- decisions -------------------------------------------------------------

    def ceiling(self) -> Policy | None:
        """The policy a request must also pass: a sandbox's node (`proxy.tenancy`), or none."""
        return None

    def placeholders(self) -> PlaceholderIndex:
        """Every placeholder a request is searched for (`proxy.values.swap`): this file's."""
        return self.config.placeholders

    def holder(self, entry: Entry | None) -> Holder | None:
        """Who holds the placeholders of a deciding entry of this policy (`proxy.values.swap`)."""
        return None if entry is None else (self.config.source, entry.index)

    def decide(self, host: Host, port: int, *, tls: bool | None) -> Decision:
        """Name stage. `tls` is None when not known yet (a CONNECT). In report-only mode
        (global, or of the deciding entry) a reportable refusal comes back `would_deny`."""
        name = host.name
        if name is None:
            return self._decision(host, port, tls)
        key = (name, port, tls)
        found = self._decided.get(key)
        if found is None:
            found = self._decision(host, port, tls)
            if len(self._decided) >= DECIDED_ENTRIES:  # a sandbox may name hosts without end
                self._decided.clear()
            self._decided[key] = found
        return found

    def _decision(self, host: Host, port: int, tls: bool | None) -> Decision:
        """What `decide` answers, computed (a subclass bounds it by another policy's)."""
        return self.reported(self._decide(host, port, tls))

    def opened_by_address(self, destination: tuple[Host, int] | None) -> bool:
        """An IP destination allowed by an explicit IP/CIDR entry (not by `*`)."""
        if destination is None or destination[0].ip is None:
            return False
        decision = self.decide(destination[0], destination[1], tls=None)
        entry = decision.entry
        return decision.allowed and entry is not None and entry.kind is PatternKind.ADDRESS

    def reported(self, decision: Decision) -> Decision:
        """`decision`, or `would_deny` when it is a reportable refusal in report-only mode."""
        if decision.allowed or decision.reason not in REPORTABLE:
            return decision
        if self.config.report_only or (decision.entry is not None and decision.entry.report_only):
            return Decision.would_deny(decision)
        return decision

    def _decide(self, host: Host, port: int, tls: bool | None) -> Decision:
        if host.ip is not None:
            return self._decide_address(host.ip, port, tls)
        name = host.name
        if name is None:
            raise InvariantError("a Host without an address has a name")
        if name in LOOPBACK_NAMES or name.endswith(".localhost"):
            return Decision.deny(Reason.LOOPBACK)
        entry = self.entry_for_name(name)
        if entry is None:
            return Decision.deny(Reason.NOT_ALLOWLISTED)
        if name in METADATA_NAMES and entry.kind is not PatternKind.EXACT:
            return Decision.deny(Reason.INTERNAL_ADDRESS, entry)
        return self._finish(entry, port, tls)

    def _decide_address(self, ip: IPAddress, port: int, tls: bool | None) -> Decision:
        kind = classify(ip)
        if kind in NEVER_ALLOWED:
            return Decision.deny(Reason.LOOPBACK)
        if self._is_self(ip, port):
            return Decision.deny(Reason.PROXY_HOST)  # the host's own address: no loopback
        entry = self.entry_for_address(ip)
        if entry is None and kind is AddressClass.PUBLIC:
            entry = self._any
        if entry is None:
            reason = (
                Reason.NOT_ALLOWLISTED if kind is AddressClass.PUBLIC else Reason.INTERNAL_ADDRESS
            )
            return Decision.deny(reason)
        return self._finish(entry, port, tls)

    @staticmethod
    def _finish(entry: Entry, port: int, tls: bool | None) -> Decision:
        if not entry.allows_port(port):
            return Decision.deny(Reason.PORT_NOT_ALLOWED, entry)
        if (
            (entry.transform or entry.secrets or entry.credential)
            and tls is False
            and not entry.allow_plaintext
        ):
            return Decision.deny(Reason.PLAINTEXT_CREDENTIALS, entry)
        return Decision.allow(entry)

    def pick_address(
        self, decision: Decision, addresses: Sequence[IPAddress], port: int
    ) -> tuple[Decision, IPAddress | None]:
        """Address stage: the first resolved address the policy permits, in resolver order.

        A loopback/unspecified answer is never used; an internal one only when an
        IP/CIDR entry (whose ports allow `port`) opens it; a public one always.
        """
        if not decision.allowed:
            return decision, None
        if not addresses:
            return Decision.deny(Reason.DNS_FAILURE, decision.entry), None
        saw_loopback = saw_self = False
        for ip in addresses:
            kind = classify(ip)
            if kind in NEVER_ALLOWED:
                saw_loopback = True
                continue
            if self._is_self(ip, port):
                saw_self = True
                continue
            if kind is AddressClass.PUBLIC:
                return decision, ip
            opener = self.entry_for_address(ip)
            if opener is not None and opener.allows_port(port):
                return decision, ip
        reason = Reason.INTERNAL_ADDRESS
        if saw_loopback or saw_self:
            reason = Reason.LOOPBACK if saw_loopback else Reason.PROXY_HOST
        return Decision.deny(reason, decision.entry), None

    def _is_self(self, ip: IPAddress, port: int) -> bool:
        """The proxy's own endpoint, or an address of this host that no single-address
        entry names (D22): a CIDR that happens to contain the host opens none of its ports."""
        if (ip, port) in self._self_addresses:
            return True
        if classify(ip) in NOT_HOST_ADDRESSES:
            return False  # Linux binds broadcast and multicast too: not the host's own
        if self._is_local is None or not self._is_local(ip):
            return False
        entry = self.entry_for_address(ip)
        network = entry.network if entry is not None else None
        return network is None or network.prefixlen != network.max_prefixlen


def refuse_echoing_method(decision: Decision, method: str) -> Decision:
    """TRACE/TRACK to a host that gets injected credentials is refused (D31).

    The answer to TRACE is the request as the origin received it, credentials included:
    an echo that no header redaction can be trusted to catch in every encoding.
    """
    entry = decision.entry
    echoes = method.upper() in ECHOING_METHODS
    credentialled = entry is not None and bool(entry.transform or entry.secrets or entry.credential)
    if echoes and decision.allowed and credentialled:
        return Decision.deny(Reason.METHOD_NOT_ALLOWED, entry)
    return decision
