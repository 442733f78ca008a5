"""IP address classification: is a destination public, internal, or never reachable?

Invariants:
* `classify` is total and deterministic: every IPv4/IPv6 address gets exactly one
  `AddressClass`, decided by the explicit tables below (IANA special-purpose registries),
  not by the `ipaddress` module's ``is_*`` properties, whose answers change between Python
  releases and are wrong for several embedded forms (``::ffff:127.0.0.1`` is not
  ``is_loopback`` and ``64:ff9b::7f00:1`` is ``is_global`` on Python 3.12).
* An IPv6 address that carries IPv4 (mapped, compatible, SIIT-translated, NAT64, 6to4,
  Teredo) is never milder than any IPv4 address it carries: its class is the most severe
  of its own range's class and theirs. So no IPv6 spelling of loopback is anything but
  `LOOPBACK`.
* An IPv6 address outside 2000::/3 (the only range IANA allocates global unicast from)
  and not in a table below is `RESERVED`: unknown means internal.
* Pure Python: no mitmproxy, no DNS, no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from sandbox_egress.proxy.hosts import IPAddress


class AddressClass(StrEnum):
    """What kind of destination an address is
    (docs/configuration.md#destinations-always-refused)."""

    PUBLIC = "public"
    LOOPBACK = "loopback"
    UNSPECIFIED = "unspecified"
    PRIVATE = "private"
    SHARED = "shared"  # carrier-grade NAT, 100.64.0.0/10
    LINK_LOCAL = "link_local"
    METADATA = "metadata"  # cloud instance metadata endpoints
    MULTICAST = "multicast"
    BROADCAST = "broadcast"
    RESERVED = "reserved"  # any other address that is not globally routable


# Classes that no configuration can open.
NEVER_ALLOWED: frozenset[AddressClass] = frozenset(
    {AddressClass.LOOPBACK, AddressClass.UNSPECIFIED}
)

# Mildest first. An address with several readings takes the most severe one.
SEVERITY: tuple[AddressClass, ...] = (
    AddressClass.PUBLIC,
    AddressClass.RESERVED,
    AddressClass.MULTICAST,
    AddressClass.BROADCAST,
    AddressClass.SHARED,
    AddressClass.PRIVATE,
    AddressClass.LINK_LOCAL,
    AddressClass.METADATA,
    AddressClass.UNSPECIFIED,
    AddressClass.LOOPBACK,
)

# First match wins, so single addresses come before the ranges they sit in.
_V4_TABLE: tuple[tuple[IPv4Network, AddressClass], ...] = tuple(
    (IPv4Network(net), cls)
    for net, cls in (
        # AWS, GCP, Azure, OCI, ... instance metadata
        ("169.254.169.254/32", AddressClass.METADATA),
        ("169.254.170.2/32", AddressClass.METADATA),  # AWS ECS task metadata and credentials
        ("100.100.100.200/32", AddressClass.METADATA),  # Alibaba Cloud
        ("168.63.129.16/32", AddressClass.METADATA),  # Azure WireServer (inside a public range)
        ("255.255.255.255/32", AddressClass.BROADCAST),
        ("0.0.0.0/8", AddressClass.UNSPECIFIED),
        ("127.0.0.0/8", AddressClass.LOOPBACK),
        ("10.0.0.0/8", AddressClass.PRIVATE),
        ("172.16.0.0/12", AddressClass.PRIVATE),
        ("192.168.0.0/16", AddressClass.PRIVATE),
        ("100.64.0.0/10", AddressClass.SHARED),
        ("169.254.0.0/16", AddressClass.LINK_LOCAL),
        ("224.0.0.0/4", AddressClass.MULTICAST),
        # IETF protocol assignments: the whole /24, including the anycast .9 and .10
        ("192.0.0.0/24", AddressClass.RESERVED),
        ("192.0.2.0/24", AddressClass.RESERVED),  # TEST-NET-1
        ("192.88.99.0/24", AddressClass.RESERVED),  # deprecated 6to4 relay anycast
        ("198.18.0.0/15", AddressClass.RESERVED),  # benchmarking
        ("198.51.100.0/24", AddressClass.RESERVED),  # TEST-NET-2
        ("203.0.113.0/24", AddressClass.RESERVED),  # TEST-NET-3
        ("240.0.0.0/4", AddressClass.RESERVED),  # reserved for future use
    )
)

_V6_TABLE: tuple[tuple[IPv6Network, AddressClass], ...] = tuple(
    (IPv6Network(net), cls)
    for net, cls in (
        ("::1/128", AddressClass.LOOPBACK),
        ("::/128", AddressClass.UNSPECIFIED),
        ("fd00:ec2::254/128", AddressClass.METADATA),  # AWS instance metadata over IPv6
        ("ff00::/8", AddressClass.MULTICAST),
        ("fe80::/10", AddressClass.LINK_LOCAL),
        ("fec0::/10", AddressClass.RESERVED),  # deprecated site-local
        ("fc00::/7", AddressClass.PRIVATE),  # unique local addresses
        # Transition forms: the carried IPv4 address decides (see embedded_ipv4).
        ("::ffff:0:0/96", AddressClass.PUBLIC),  # IPv4-mapped
        ("64:ff9b::/96", AddressClass.PUBLIC),  # NAT64 well-known prefix
        ("2002::/16", AddressClass.PUBLIC),  # 6to4
        ("2001::/32", AddressClass.PUBLIC),  # Teredo
        # Globally reachable assignments inside 2001::/23, then the rest of it.
        ("2001:1::1/128", AddressClass.PUBLIC),
        ("2001:1::2/128", AddressClass.PUBLIC),
        ("2001:1::3/128", AddressClass.PUBLIC),
        ("2001:3::/32", AddressClass.PUBLIC),
        ("2001:4:112::/48", AddressClass.PUBLIC),
        ("2001:20::/28", AddressClass.PUBLIC),
        ("2001:30::/28", AddressClass.PUBLIC),
        ("2001::/23", AddressClass.RESERVED),
        ("2001:db8::/32", AddressClass.RESERVED),  # documentation
        ("3fff::/20", AddressClass.RESERVED),  # documentation (RFC 9637)
        ("2000::/3", AddressClass.PUBLIC),
    )
)

_NAT64_PREFIXES = (IPv6Network("64:ff9b::/96"), IPv6Network("64:ff9b:1::/48"))
_IPV4_MASK = 0xFFFF_FFFF


def classify(ip: IPAddress) -> AddressClass:
    """The class of `ip`; for IPv6, the most severe of its own and its embedded IPv4's."""
    if isinstance(ip, IPv4Address):
        return _lookup_v4(ip)
    classes = [_lookup_v6(ip), *(_lookup_v4(v4) for v4 in embedded_ipv4(ip))]
    return max(classes, key=SEVERITY.index)


def embedded_ipv4(ip: IPAddress) -> tuple[IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, in a fixed order, without duplicates.

    Forms: IPv4-mapped ``::ffff:a.b.c.d``; SIIT ``::ffff:0:a.b.c.d``; IPv4-compatible
    ``::a.b.c.d`` (not ``::`` or ``::1``); NAT64 ``64:ff9b::/96`` and the local-use
    ``64:ff9b:1::/48`` (IPv4 in the last 32 bits, the /96 layout); 6to4 ``2002::/16``;
    Teredo ``2001::/32`` (server, then the bit-inverted client). Empty for IPv4 and for
    IPv6 that carries none.
    """
    if isinstance(ip, IPv4Address):
        return ()
    value = int(ip)
    high, low = value >> 32, IPv4Address(value & _IPV4_MASK)
    found: list[IPv4Address] = []
    if high == 0xFFFF:  # ::ffff:a.b.c.d
        found.append(low)
    if high == 0xFFFF_0000:  # ::ffff:0:a.b.c.d
        found.append(low)
    if high == 0 and value > 1:  # ::a.b.c.d
        found.append(low)
    if any(ip in prefix for prefix in _NAT64_PREFIXES):
        found.append(low)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return tuple(dict.fromkeys(found))


def match_candidates(ip: IPAddress) -> tuple[IPAddress, ...]:
    """`ip` followed by the IPv4 addresses it embeds: what IP/CIDR entries are matched against.

    A policy that opens an internal address because one candidate matches should also
    check the others: a Teredo address carries two IPv4 addresses and only one may be
    the one an entry names.
    """
    return (ip, *embedded_ipv4(ip))


# The tables as (network address, netmask, class) integers: `ip in network` builds and
# compares address objects per row, a masked integer compare does not (issue 26, D170).
_V4_MASKED = tuple((int(n.network_address), int(n.netmask), c) for n, c in _V4_TABLE)
_V6_MASKED = tuple((int(n.network_address), int(n.netmask), c) for n, c in _V6_TABLE)


def _lookup_v4(ip: IPv4Address) -> AddressClass:
    value = int(ip)
    for network, mask, cls in _V4_MASKED:
        if value & mask == network:
            return cls
    return AddressClass.PUBLIC


def _lookup_v6(ip: IPv6Address) -> AddressClass:
    value = int(ip)
    for network, mask, cls in _V6_MASKED:
        if value & mask == network:
            return cls
    return AddressClass.RESERVED
