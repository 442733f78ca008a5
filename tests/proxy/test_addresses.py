"""IP address classification (proxy/addresses.py): named tables, then properties.

Rows marked "stdlib:" are ones where Python 3.12's `ipaddress` properties give a wrong or
too permissive answer; they are here so that delegating to the stdlib would fail.
"""

from __future__ import annotations

from collections import Counter
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy import addresses
from sandbox_egress.proxy.addresses import (
    NEVER_ALLOWED,
    SEVERITY,
    AddressClass,
    classify,
    embedded_ipv4,
    match_candidates,
)
from sandbox_egress.proxy.hosts import canonical_host

C = AddressClass
TEREDO_SERVER = "4136:e378"  # 65.54.227.120
# Teredo carries the client bit-inverted: ~127.0.0.1 == 80ff:fffe, ~8.8.8.8 == f7f7:f7f7.
TEREDO_CLIENT_LOOPBACK = f"2001:0:{TEREDO_SERVER}:8000:63bf:80ff:fffe"
TEREDO_SERVER_LOOPBACK = "2001:0:7f00:1:8000:63bf:f7f7:f7f7"
TEREDO_PUBLIC = f"2001:0:{TEREDO_SERVER}:8000:63bf:f7f7:f7f7"

CLASSES = [
    # loopback
    pytest.param("127.0.0.1", C.LOOPBACK, id="loopback-v4"),
    pytest.param("127.255.255.254", C.LOOPBACK, id="loopback-v4-top"),
    pytest.param("::1", C.LOOPBACK, id="loopback-v6"),
    pytest.param("::ffff:127.0.0.1", C.LOOPBACK, id="loopback-mapped"),  # stdlib: not loopback
    pytest.param("::ffff:0:127.0.0.1", C.LOOPBACK, id="loopback-siit"),
    pytest.param("::127.0.0.1", C.LOOPBACK, id="loopback-compatible"),
    pytest.param("64:ff9b::7f00:1", C.LOOPBACK, id="loopback-nat64"),  # stdlib: is_global
    pytest.param("64:ff9b:1:aaaa::7f00:1", C.LOOPBACK, id="loopback-nat64-local"),
    pytest.param("2002:7f00:1::", C.LOOPBACK, id="loopback-6to4"),  # stdlib: is_global
    pytest.param(TEREDO_CLIENT_LOOPBACK, C.LOOPBACK, id="loopback-teredo-client"),
    pytest.param(TEREDO_SERVER_LOOPBACK, C.LOOPBACK, id="loopback-teredo-server"),
    # unspecified
    pytest.param("0.0.0.0", C.UNSPECIFIED, id="unspecified-v4"),
    pytest.param("0.1.2.3", C.UNSPECIFIED, id="unspecified-v4-range"),
    pytest.param("::", C.UNSPECIFIED, id="unspecified-v6"),
    pytest.param("::ffff:0.0.0.0", C.UNSPECIFIED, id="unspecified-mapped"),
    pytest.param("::2", C.UNSPECIFIED, id="unspecified-compatible"),
    pytest.param("2002::", C.UNSPECIFIED, id="unspecified-6to4"),
    # metadata
    pytest.param("169.254.169.254", C.METADATA, id="metadata-imds"),
    pytest.param("169.254.170.2", C.METADATA, id="metadata-ecs"),
    pytest.param("100.100.100.200", C.METADATA, id="metadata-alibaba"),
    pytest.param("168.63.129.16", C.METADATA, id="metadata-azure"),  # stdlib: is_global
    pytest.param("fd00:ec2::254", C.METADATA, id="metadata-aws-v6"),
    pytest.param("::ffff:169.254.169.254", C.METADATA, id="metadata-mapped"),
    pytest.param("64:ff9b::a9fe:a9fe", C.METADATA, id="metadata-nat64"),
    pytest.param("2002:a9fe:a9fe::", C.METADATA, id="metadata-6to4"),
    # link-local
    pytest.param("169.254.0.1", C.LINK_LOCAL, id="link-local-v4"),
    pytest.param("169.254.169.253", C.LINK_LOCAL, id="link-local-next-to-metadata"),
    pytest.param("fe80::1", C.LINK_LOCAL, id="link-local-v6"),
    pytest.param("febf:ffff::1", C.LINK_LOCAL, id="link-local-v6-top"),
    pytest.param("::ffff:169.254.1.1", C.LINK_LOCAL, id="link-local-mapped"),
    # private
    pytest.param("10.0.0.1", C.PRIVATE, id="private-10"),
    pytest.param("172.16.0.1", C.PRIVATE, id="private-172-16"),
    pytest.param("172.31.255.255", C.PRIVATE, id="private-172-31"),
    pytest.param("192.168.1.1", C.PRIVATE, id="private-192-168"),
    pytest.param("fc00::1", C.PRIVATE, id="private-ula-fc"),
    pytest.param("fd12:3456::1", C.PRIVATE, id="private-ula-fd"),
    pytest.param("::ffff:10.0.0.1", C.PRIVATE, id="private-mapped"),
    pytest.param("2002:c0a8:101::", C.PRIVATE, id="private-6to4"),
    # shared (carrier-grade NAT)
    pytest.param("100.64.0.1", C.SHARED, id="shared-low"),  # stdlib: not is_private
    pytest.param("100.127.255.254", C.SHARED, id="shared-high"),
    pytest.param("::ffff:100.64.0.1", C.SHARED, id="shared-mapped"),
    # broadcast
    pytest.param("255.255.255.255", C.BROADCAST, id="broadcast-v4"),
    pytest.param("::ffff:255.255.255.255", C.BROADCAST, id="broadcast-mapped"),
    # multicast
    pytest.param("224.0.0.1", C.MULTICAST, id="multicast-v4"),
    pytest.param("239.255.255.250", C.MULTICAST, id="multicast-v4-ssdp"),
    pytest.param("ff02::1", C.MULTICAST, id="multicast-v6"),
    pytest.param("ff0e::1", C.MULTICAST, id="multicast-v6-global-scope"),
    pytest.param("::ffff:224.0.0.1", C.MULTICAST, id="multicast-mapped"),
    # reserved
    pytest.param("192.0.0.8", C.RESERVED, id="reserved-ietf"),
    pytest.param("192.0.0.100", C.RESERVED, id="reserved-ietf-high"),  # stdlib: is_global
    pytest.param("192.0.0.9", C.RESERVED, id="reserved-pcp-anycast"),
    pytest.param("192.0.2.1", C.RESERVED, id="reserved-test-net-1"),
    pytest.param("198.51.100.7", C.RESERVED, id="reserved-test-net-2"),
    pytest.param("203.0.113.7", C.RESERVED, id="reserved-test-net-3"),
    pytest.param("198.18.0.1", C.RESERVED, id="reserved-benchmark"),
    pytest.param("198.19.255.255", C.RESERVED, id="reserved-benchmark-top"),
    pytest.param("192.88.99.1", C.RESERVED, id="reserved-6to4-relay"),
    pytest.param("240.0.0.1", C.RESERVED, id="reserved-class-e"),
    pytest.param("255.255.255.254", C.RESERVED, id="reserved-below-broadcast"),
    pytest.param("2001:db8::1", C.RESERVED, id="reserved-documentation-v6"),
    pytest.param("3fff::1", C.RESERVED, id="reserved-documentation-3fff"),  # stdlib: is_global
    pytest.param("100::1", C.RESERVED, id="reserved-discard"),
    pytest.param("2001:2::1", C.RESERVED, id="reserved-benchmark-v6"),
    pytest.param("2001:10::1", C.RESERVED, id="reserved-orchid"),
    pytest.param("fec0::1", C.RESERVED, id="reserved-site-local"),  # stdlib: is_global
    pytest.param("5f00::1", C.RESERVED, id="reserved-srv6"),  # stdlib: is_global
    pytest.param("4000::1", C.RESERVED, id="reserved-unallocated"),
    pytest.param("::8.8.8.8", C.RESERVED, id="reserved-compatible-public"),  # stdlib: is_global
    pytest.param("::ffff:0:8.8.8.8", C.RESERVED, id="reserved-siit-public"),
    pytest.param("64:ff9b:1::808:808", C.RESERVED, id="reserved-nat64-local-public"),
    pytest.param("64:ff9b:0:0:1::808:808", C.RESERVED, id="reserved-outside-nat64-96"),
    # public
    pytest.param("8.8.8.8", C.PUBLIC, id="public-v4"),
    pytest.param("1.1.1.1", C.PUBLIC, id="public-v4-cloudflare"),
    pytest.param("100.63.255.255", C.PUBLIC, id="public-below-shared"),
    pytest.param("100.128.0.0", C.PUBLIC, id="public-above-shared"),
    pytest.param("172.15.255.255", C.PUBLIC, id="public-below-172-16"),
    pytest.param("172.32.0.0", C.PUBLIC, id="public-above-172-31"),
    pytest.param("168.63.129.17", C.PUBLIC, id="public-next-to-azure-metadata"),
    pytest.param("192.31.196.1", C.PUBLIC, id="public-as112"),
    pytest.param("223.255.255.255", C.PUBLIC, id="public-below-multicast"),
    pytest.param("2606:4700:4700::1111", C.PUBLIC, id="public-v6"),
    pytest.param("2001:4860:4860::8888", C.PUBLIC, id="public-v6-google"),
    pytest.param("::ffff:8.8.8.8", C.PUBLIC, id="public-mapped"),
    pytest.param("64:ff9b::808:808", C.PUBLIC, id="public-nat64"),
    pytest.param("2002:808:808::1", C.PUBLIC, id="public-6to4"),
    pytest.param(TEREDO_PUBLIC, C.PUBLIC, id="public-teredo"),
    pytest.param("2001:3::1", C.PUBLIC, id="public-amt"),  # stdlib: not is_global
    pytest.param("2001:4:112::1", C.PUBLIC, id="public-as112-v6"),
    pytest.param("2620:4f:8000::1", C.PUBLIC, id="public-as112-delegation"),
]


@pytest.mark.parametrize(("raw", "expected"), CLASSES)
def test_classify(raw: str, expected: AddressClass) -> None:
    assert classify(ip_address(raw)) is expected


def test_every_class_is_in_the_table_twice() -> None:
    counts = Counter(row.values[1] for row in CLASSES)
    assert all(counts[cls] >= 2 for cls in AddressClass), counts


# Every spelling of a loopback and a metadata address, through the host parser.
SPELLINGS = [
    pytest.param("127.0.0.1", C.LOOPBACK, id="lo-dotted"),
    pytest.param("2130706433", C.LOOPBACK, id="lo-decimal"),
    pytest.param("0x7f000001", C.LOOPBACK, id="lo-hex"),
    pytest.param("017700000001", C.LOOPBACK, id="lo-octal-whole"),
    pytest.param("0177.0.0.1", C.LOOPBACK, id="lo-octal-dotted"),
    pytest.param("127.1", C.LOOPBACK, id="lo-short-2"),
    pytest.param("127.0.1", C.LOOPBACK, id="lo-short-3"),
    pytest.param("0x7f.0.0.1", C.LOOPBACK, id="lo-mixed"),
    pytest.param("127.0.0.1.", C.LOOPBACK, id="lo-trailing-dot"),
    pytest.param("127.127.127.127", C.LOOPBACK, id="lo-other-in-8"),
    pytest.param("::1", C.LOOPBACK, id="lo-v6-bare"),
    pytest.param("[::1]", C.LOOPBACK, id="lo-v6-bracketed"),
    pytest.param("[0:0:0:0:0:0:0:1]", C.LOOPBACK, id="lo-v6-long"),
    pytest.param("[::ffff:127.0.0.1]", C.LOOPBACK, id="lo-v6-mapped-dotted"),
    pytest.param("[::ffff:7f00:1]", C.LOOPBACK, id="lo-v6-mapped-hex"),
    pytest.param("[0:0:0:0:0:ffff:7f00:1]", C.LOOPBACK, id="lo-v6-mapped-long"),
    pytest.param("[::127.0.0.1]", C.LOOPBACK, id="lo-v6-compatible"),
    pytest.param("[::ffff:0:7f00:1]", C.LOOPBACK, id="lo-v6-siit"),
    pytest.param("[64:ff9b::127.0.0.1]", C.LOOPBACK, id="lo-v6-nat64-dotted"),
    pytest.param("[64:ff9b::7f00:1]", C.LOOPBACK, id="lo-v6-nat64-hex"),
    pytest.param("[64:ff9b:1::7f00:1]", C.LOOPBACK, id="lo-v6-nat64-local"),
    pytest.param("[2002:7f00:1::]", C.LOOPBACK, id="lo-v6-6to4"),
    pytest.param(f"[{TEREDO_CLIENT_LOOPBACK}]", C.LOOPBACK, id="lo-v6-teredo"),
    pytest.param("0", C.UNSPECIFIED, id="any-decimal"),
    pytest.param("0x0", C.UNSPECIFIED, id="any-hex"),
    pytest.param("0.0", C.UNSPECIFIED, id="any-short"),
    pytest.param("[::]", C.UNSPECIFIED, id="any-v6"),
    pytest.param("[::ffff:0.0.0.0]", C.UNSPECIFIED, id="any-v6-mapped"),
    pytest.param("2852039166", C.METADATA, id="imds-decimal"),
    pytest.param("0xa9fea9fe", C.METADATA, id="imds-hex"),
    pytest.param("0251.0376.0251.0376", C.METADATA, id="imds-octal"),
    pytest.param("169.254.43518", C.METADATA, id="imds-short"),
    pytest.param("0xa9.0xfe.0xa9.0xfe", C.METADATA, id="imds-hex-dotted"),
    pytest.param("[::ffff:169.254.169.254]", C.METADATA, id="imds-v6-mapped"),
    pytest.param("[::ffff:a9fe:a9fe]", C.METADATA, id="imds-v6-mapped-hex"),
    pytest.param("[64:ff9b::169.254.169.254]", C.METADATA, id="imds-v6-nat64"),
    pytest.param("[2002:a9fe:a9fe::1]", C.METADATA, id="imds-v6-6to4"),
]


@pytest.mark.parametrize(("raw", "expected"), SPELLINGS)
def test_spellings_through_the_host_parser(raw: str, expected: AddressClass) -> None:
    ip = canonical_host(raw).ip
    assert ip is not None
    assert classify(ip) is expected


V4 = IPv4Address
EMBEDDED = [
    pytest.param("8.8.8.8", (), id="ipv4-itself"),
    pytest.param("2606:4700::1", (), id="plain-v6"),
    pytest.param("::", (), id="unspecified-not-compatible"),
    pytest.param("::1", (), id="loopback-not-compatible"),
    pytest.param("::2", (V4("0.0.0.2"),), id="compatible-low"),
    pytest.param("::1.2.3.4", (V4("1.2.3.4"),), id="compatible"),
    pytest.param("::ffff:1.2.3.4", (V4("1.2.3.4"),), id="mapped"),
    pytest.param("::ffff:0:1.2.3.4", (V4("1.2.3.4"),), id="siit"),
    pytest.param("64:ff9b::1.2.3.4", (V4("1.2.3.4"),), id="nat64"),
    pytest.param("64:ff9b:1:ab:cd::1.2.3.4", (V4("1.2.3.4"),), id="nat64-local"),
    pytest.param("64:ff9b:0:0:1::1.2.3.4", (), id="not-nat64-96"),
    pytest.param("2002:102:304::1", (V4("1.2.3.4"),), id="6to4"),
    pytest.param(TEREDO_CLIENT_LOOPBACK, (V4("65.54.227.120"), V4("127.0.0.1")), id="teredo"),
    pytest.param("2001:0:102:304::fefd:fcfb", (V4("1.2.3.4"),), id="teredo-same-twice"),
    pytest.param("2001:1::1", (), id="next-to-teredo"),
]


@pytest.mark.parametrize(("raw", "expected"), EMBEDDED)
def test_embedded_ipv4(raw: str, expected: tuple[IPv4Address, ...]) -> None:
    ip = ip_address(raw)
    assert embedded_ipv4(ip) == expected
    assert match_candidates(ip) == (ip, *expected)


def test_classes_are_lowercase_strings_and_severity_is_complete() -> None:
    assert all(cls.value == cls.name.lower() for cls in AddressClass)
    assert sorted(SEVERITY) == sorted(AddressClass)
    assert SEVERITY[0] is C.PUBLIC
    assert SEVERITY[-1] is C.LOOPBACK
    assert frozenset({C.LOOPBACK, C.UNSPECIFIED}) == NEVER_ALLOWED


def _octal(ip: IPv4Address) -> str:
    return ".".join(f"0{octet:o}" for octet in ip.packed)


@settings(max_examples=300)
@given(st.ip_addresses(v=4))
def test_ipv4_spellings_classify_alike(ip: IPv4Address) -> None:
    expected = classify(ip)
    a, b, c, d = ip.packed
    v4_spellings = [str(int(ip)), hex(int(ip)), _octal(ip), f"{a}.{b}.{c * 256 + d}", f"{ip}."]
    for raw in v4_spellings:
        assert canonical_host(raw).ip == ip, raw
    v6_spellings = [f"::ffff:{ip}", f"[::ffff:{ip}]", f"[64:ff9b::{ip}]"]
    for raw in v6_spellings:
        host = canonical_host(raw)
        assert host.ip is not None, raw
        assert classify(host.ip) is expected, raw


NETWORKS_OF_INTEREST = [
    "::/96",
    "::ffff:0:0/96",
    "::ffff:0:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "2001::/23",
    "2002::/16",
    "fc00::/6",
    "ff00::/8",
]
ANY_V6 = st.one_of(
    st.ip_addresses(v=6),
    st.sampled_from(NETWORKS_OF_INTEREST).flatmap(lambda net: st.ip_addresses(network=net)),
)
# Where a public class is right although the stdlib says "not global": transition forms
# whose carried IPv4 address decides, and the globally reachable parts of 2001::/23.
AUDITED_PUBLIC = [
    IPv6Network(net)
    for net in (
        *("::ffff:0:0/96", "64:ff9b::/96", "2002::/16", "2001::/32"),
        *("2001:1::/126", "2001:3::/32", "2001:4:112::/48", "2001:20::/28", "2001:30::/28"),
    )
]


@settings(max_examples=300)
@given(ANY_V6)
def test_ipv6_never_milder_than_what_it_carries(ip: IPv6Address) -> None:
    cls = classify(ip)
    for v4 in embedded_ipv4(ip):
        assert SEVERITY.index(cls) >= SEVERITY.index(classify(v4))
    if not ip.is_global and cls is C.PUBLIC:
        assert any(ip in net for net in AUDITED_PUBLIC)


@settings(max_examples=300)
@given(st.ip_addresses(v=4))
def test_ipv4_not_global_in_stdlib_is_not_public(ip: IPv4Address) -> None:
    if not ip.is_global:
        assert classify(ip) is not C.PUBLIC


def _by_membership(ip: IPv4Address | IPv6Address) -> AddressClass:
    """The tables read with `ip in network`, as before the masked integers (D170)."""
    v4 = isinstance(ip, IPv4Address)
    for network, cls in addresses._V4_TABLE if v4 else addresses._V6_TABLE:
        if ip in network:
            return cls
    return AddressClass.PUBLIC if v4 else AddressClass.RESERVED


def _edges() -> list[IPv4Address | IPv6Address]:
    found: list[IPv4Address | IPv6Address] = []
    for network, _ in (*addresses._V4_TABLE, *addresses._V6_TABLE):
        first, last = int(network.network_address), int(network.broadcast_address)
        top = 2**network.max_prefixlen - 1
        for value in (first - 1, first, last, last + 1):
            if 0 <= value <= top:
                found.append(type(network.network_address)(value))
    return found


def test_masked_lookup_reads_the_tables_as_membership_at_every_edge() -> None:
    lookup = {4: addresses._lookup_v4, 6: addresses._lookup_v6}
    for ip in _edges():
        assert lookup[ip.version](ip) == _by_membership(ip), ip  # type: ignore[operator]


@given(st.ip_addresses())
def test_masked_lookup_reads_the_tables_as_membership(ip: IPv4Address | IPv6Address) -> None:
    lookup = addresses._lookup_v4 if ip.version == 4 else addresses._lookup_v6
    assert lookup(ip) == _by_membership(ip)  # type: ignore[arg-type]
