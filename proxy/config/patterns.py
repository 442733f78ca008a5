"""An allowlist entry's `domain` value, classified (docs/configuration.md#domain).

`parse_pattern` turns the text into a canonical `Pattern` or raises ValueError saying
what is wrong (never quoting the value: the loader adds it, shortened, `common.tokens`).

Invariants:
* Names are lowercase IDNA without the trailing dot; a wildcard is one leading `*.`
  label; addresses and ranges are `ip_network` values.
* Loopback can never be opened: a loopback name, a loopback or unspecified address, or a
  range inside them is refused here; a wider range (0.0.0.0/0) is accepted and its
  loopback part stays refused at run time (`proxy.policy`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

from sandbox_egress.common.invariant import InvariantError
from sandbox_egress.common.tokens import shown
from sandbox_egress.proxy.addresses import NEVER_ALLOWED, classify
from sandbox_egress.proxy.hosts import HostError, canonical_host, canonical_name

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


class PatternKind(Enum):
    EXACT = "exact"
    WILDCARD = "wildcard"
    ANY = "any"
    ADDRESS = "address"


@dataclass(frozen=True, slots=True)
class Pattern:
    text: str  # canonical: what the entry is matched and deduplicated by
    kind: PatternKind
    name: str | None = None  # EXACT: the name; WILDCARD: the suffix after "*."
    network: IPNetwork | None = None  # ADDRESS: the address or range


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _refuse_url(domain: str) -> None:
    """A pasted URL or a host with a path is named as such, not as an invalid CIDR."""
    if _SCHEME.match(domain):
        host = urlsplit(domain).hostname
        hint = f": write {shown(host, 200)}" if host else ""
        raise ValueError(f"a host name, not a URL{hint}")
    head = domain.split("/", 1)[0]
    try:
        ipaddress.ip_address(head)
    except ValueError:
        raise ValueError(
            f"a host name, not a URL or a path: write {shown(head, 200)} (and the path in `rules`)"
        ) from None


def parse_pattern(domain: str) -> Pattern:
    """Classify a `domain` value. Raises ValueError with the problem."""
    domain = domain.strip()
    if not domain:
        raise ValueError("required, a non-empty string")
    if domain == "*":
        return Pattern("*", PatternKind.ANY)
    if "/" in domain:
        _refuse_url(domain)
        try:
            network = ipaddress.ip_network(domain, strict=True)
        except ValueError as exc:
            raise ValueError(f"invalid CIDR: {exc}") from None
        _refuse_loopback_network(network)
        return Pattern(network.compressed, PatternKind.ADDRESS, network=network)
    if domain.startswith("*."):
        suffix = domain[2:]
        if "*" in suffix:
            raise ValueError("a wildcard may only be a single leading '*.' label")
        name = _name(suffix)
        if name == "localhost" or name.endswith(".localhost"):
            raise ValueError("loopback names can never be opened")
        return Pattern(f"*.{name}", PatternKind.WILDCARD, name=name)
    if "*" in domain:
        raise ValueError("a wildcard may only be a single leading '*.' label, or '*' alone")
    try:
        host = canonical_host(domain)
    except HostError as exc:
        raise ValueError(f"invalid host: {exc}") from None
    if host.ip is not None:
        network = ipaddress.ip_network(host.ip)
        _refuse_loopback_network(network)
        return Pattern(network.network_address.compressed, PatternKind.ADDRESS, network=network)
    if host.name is None:
        raise InvariantError("a Host without an address has a name")
    if host.name in LOOPBACK_NAMES or host.name.endswith(".localhost"):
        raise ValueError("loopback names can never be opened")
    return Pattern(host.name, PatternKind.EXACT, name=host.name)


def _name(raw: str) -> str:
    try:
        return canonical_name(raw)
    except HostError as exc:
        raise ValueError(f"invalid host: {exc}") from None


def _refuse_loopback_network(network: IPNetwork) -> None:
    # A range inside loopback/unspecified can never be opened. A wider range
    # (0.0.0.0/0) is accepted; loopback inside it stays refused at run time.
    first, last = network.network_address, network.broadcast_address
    if classify(first) in NEVER_ALLOWED and classify(last) in NEVER_ALLOWED:
        raise ValueError("loopback and unspecified addresses can never be opened")
