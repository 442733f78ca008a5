"""Host canonicalisation and authority parsing (proxy/hosts.py): named tables, then properties."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_egress.proxy.hosts import (
    HOST_CACHE_ENTRIES,
    Host,
    HostError,
    canonical_host,
    canonical_name,
    parse_authority,
)

NAMES = [
    pytest.param("example.com", "example.com", id="plain"),
    pytest.param("API.Example.COM", "api.example.com", id="case-folded"),
    pytest.param("example.com.", "example.com", id="one-trailing-dot"),
    pytest.param("localhost", "localhost", id="single-label"),
    pytest.param("_dmarc.example.com", "_dmarc.example.com", id="underscore"),
    pytest.param("a-b.example", "a-b.example", id="hyphen"),
    pytest.param("1.2.3.example", "1.2.3.example", id="numeric-labels-then-name"),
    pytest.param("127.0.0.1.nip.io", "127.0.0.1.nip.io", id="ip-looking-prefix"),
    pytest.param("0x7f.example", "0x7f.example", id="hex-looking-label-not-last"),
    pytest.param("example.0x7g", "example.0x7g", id="last-label-not-a-number"),
    pytest.param("bücher.example", "xn--bcher-kva.example", id="idn"),
    pytest.param("BÜCHER.Example", "xn--bcher-kva.example", id="idn-uppercase"),
    pytest.param("xn--bcher-kva.example", "xn--bcher-kva.example", id="a-label-kept"),
    pytest.param("XN--BCHER-KVA.example", "xn--bcher-kva.example", id="a-label-uppercase"),
    pytest.param("bücher\uff0eexample", "xn--bcher-kva.example", id="fullwidth-dot"),
    pytest.param("bücher\u3002example", "xn--bcher-kva.example", id="ideographic-dot"),
    pytest.param("ｅｘａｍｐｌｅ.com", "example.com", id="fullwidth-letters"),
    pytest.param("ex\u00adample.com", "example.com", id="soft-hyphen-ignored"),
    pytest.param("straße.de", "xn--strae-oqa.de", id="sharp-s-nontransitional"),
    pytest.param("a" * 63 + ".com", "a" * 63 + ".com", id="label-63"),
    pytest.param(".".join(["a" * 63] * 3 + ["b" * 61]), None, id="name-253"),
]


@pytest.mark.parametrize(("raw", "expected"), NAMES)
def test_names(raw: str, expected: str | None) -> None:
    expected = raw if expected is None else expected
    assert canonical_host(raw) == Host(expected, None)
    assert str(canonical_host(raw)) == expected


IPS = [
    pytest.param("127.0.0.1", "127.0.0.1", id="v4-dotted"),
    pytest.param("127.0.0.1.", "127.0.0.1", id="v4-trailing-dot"),
    pytest.param("2130706433", "127.0.0.1", id="v4-decimal"),
    pytest.param("0x7f000001", "127.0.0.1", id="v4-hex"),
    pytest.param("0X7F000001", "127.0.0.1", id="v4-hex-uppercase"),
    pytest.param("0x00000000007f000001", "127.0.0.1", id="v4-hex-leading-zeros"),
    pytest.param("017700000001", "127.0.0.1", id="v4-octal-whole"),
    pytest.param("0177.0.0.1", "127.0.0.1", id="v4-octal-dotted"),
    pytest.param("0177.0000.0.01", "127.0.0.1", id="v4-octal-zero-padded"),
    pytest.param("127.1", "127.0.0.1", id="v4-short-2"),
    pytest.param("127.0.1", "127.0.0.1", id="v4-short-3"),
    pytest.param("0x7f.0.0.1", "127.0.0.1", id="v4-mixed-hex"),
    pytest.param("0x7f.1", "127.0.0.1", id="v4-mixed-short"),
    pytest.param("0x7f.0.0x0.0001", "127.0.0.1", id="v4-mixed-all"),
    pytest.param("127.0.0.0x1.", "127.0.0.1", id="v4-hex-last-trailing-dot"),
    pytest.param("0", "0.0.0.0", id="v4-zero"),
    pytest.param("0x", "0.0.0.0", id="v4-bare-0x-is-zero"),
    pytest.param("169.254.43518", "169.254.169.254", id="v4-metadata-short"),
    pytest.param("4294967295", "255.255.255.255", id="v4-decimal-max"),
    pytest.param("１２７．０．０．１", "127.0.0.1", id="v4-fullwidth"),
    pytest.param("::1", "::1", id="v6-bare"),
    pytest.param("[::1]", "::1", id="v6-bracketed"),
    pytest.param("[0:0:0:0:0:0:0:1]", "::1", id="v6-long"),
    pytest.param("[0000::0001]", "::1", id="v6-zero-padded"),
    pytest.param("[FE80::A]", "fe80::a", id="v6-uppercase"),
    pytest.param("::ffff:127.0.0.1", "::ffff:7f00:1", id="v6-mapped-dotted"),
    pytest.param("[::ffff:7f00:1]", "::ffff:7f00:1", id="v6-mapped-hex"),
    pytest.param("[::127.0.0.1]", "::7f00:1", id="v6-compatible"),
    pytest.param("[64:ff9b::127.0.0.1]", "64:ff9b::7f00:1", id="v6-nat64-dotted"),
]


@pytest.mark.parametrize(("raw", "expected"), IPS)
def test_ip_literals(raw: str, expected: str) -> None:
    host = canonical_host(raw)
    assert host == Host(None, ip_address(expected))
    assert str(host) == expected


REFUSED_HOSTS = [
    pytest.param("", "empty host", id="empty"),
    pytest.param("fe80::1%eth0", "zone id", id="zone-id-bare"),
    pytest.param("[fe80::1%25eth0]", "zone id", id="zone-id-bracketed"),
    pytest.param("exa%6Dple.com", "percent", id="percent-encoding"),
    pytest.param("user@example.com", "userinfo", id="userinfo"),
    pytest.param("user:pw@example.com", "userinfo", id="userinfo-password"),
    pytest.param("exa\x00mple.com", "NUL", id="nul"),
    pytest.param("example.com\r\nX-Evil: 1", "CR/LF", id="crlf"),
    pytest.param("example.com\n", "CR/LF", id="lf"),
    pytest.param("exa mple.com", "whitespace", id="space"),
    pytest.param(" example.com", "whitespace", id="leading-space"),
    pytest.param("example.com\t", "whitespace", id="tab"),
    pytest.param("example\u3000com", "whitespace", id="ideographic-space"),
    pytest.param("exa\x7fmple.com", "control", id="del"),
    pytest.param("exa\x1bmple.com", "control", id="escape"),
    pytest.param("a..b", "empty label", id="empty-label-middle"),
    pytest.param(".a.com", "empty label", id="empty-label-leading"),
    pytest.param("a.com..", "empty label", id="two-trailing-dots"),
    pytest.param(".", "empty label", id="only-dot"),
    pytest.param("\u00ad", "empty label", id="maps-to-nothing"),
    pytest.param("[example.com]", "non-IPv6", id="brackets-around-name"),
    pytest.param("[127.0.0.1]", "non-IPv6", id="brackets-around-v4"),
    pytest.param("[]", "non-IPv6", id="empty-brackets"),
    pytest.param("[::1", "unbalanced", id="missing-close"),
    pytest.param("::1]", "unbalanced", id="missing-open"),
    pytest.param("[[::1]]", "unbalanced", id="nested"),
    pytest.param("[::1].", "unbalanced", id="dot-after-bracket"),
    pytest.param("a]b.com", "unbalanced", id="stray-close"),
    pytest.param("::1::2", "invalid IPv6", id="bad-v6"),
    pytest.param("example.com:80", "invalid IPv6", id="port-in-host"),
    pytest.param("1.2.3.999", "out of range", id="v4-part-too-big"),
    pytest.param("256.0.0.1", "out of range", id="v4-first-part-too-big"),
    pytest.param("1.2.65536", "out of range", id="v4-short-last-too-big"),
    pytest.param("4294967296", "out of range", id="v4-decimal-too-big"),
    pytest.param("0x100000000", "out of range", id="v4-hex-too-big"),
    pytest.param("9" * 1000, "out of range", id="v4-huge-decimal"),
    pytest.param("1.2.3.4.5", "too many parts", id="v4-five-parts"),
    pytest.param("08.1.1.1", "invalid IPv4", id="v4-bad-octal"),
    pytest.param("0x7g.1.1.1", "invalid IPv4", id="v4-bad-hex"),
    pytest.param("example.123", "invalid IPv4", id="numeric-tld"),
    pytest.param("example.0x7f", "invalid IPv4", id="hex-tld"),
    pytest.param("a" * 64 + ".com", "label too long", id="label-64"),
    pytest.param(".".join(["a" * 63] * 3 + ["b" * 62]), "name too long", id="name-254"),
    pytest.param("a" * 2000, "host too long", id="raw-too-long"),
    pytest.param("exa_mple!.com", "invalid character", id="bang"),
    pytest.param("a/b.com", "invalid character", id="slash"),
    pytest.param("*.example.com", "invalid character", id="wildcard"),
    pytest.param("a\u2100b.com", "invalid character", id="maps-to-slash"),
    pytest.param("xn--abc.com", "internationalised", id="bad-punycode"),
    pytest.param("xn--.com", "internationalised", id="empty-punycode"),
    pytest.param("bü_cher.com", "internationalised", id="idn-underscore"),
    pytest.param("\u0301a.com", "internationalised", id="idn-leading-combining-mark"),
]


@pytest.mark.parametrize(("raw", "problem"), REFUSED_HOSTS)
def test_refused_hosts(raw: str, problem: str) -> None:
    with pytest.raises(HostError, match=problem):
        canonical_host(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("API.Example.COM", Host("api.example.com", None), id="a name"),
        pytest.param("0x7f000001", Host(None, IPv4Address("127.0.0.1")), id="an ipv4 spelling"),
        pytest.param("[::1]", Host(None, IPv6Address("::1")), id="bracketed ipv6"),
    ],
)
def test_a_remembered_spelling_gives_the_same_host(raw: str, expected: Host) -> None:
    canonical_host.cache_clear()
    assert canonical_host(raw) == expected
    assert canonical_host(raw) is canonical_host(raw) == expected  # asked again: remembered
    assert canonical_host.cache_info().hits == 2


def test_a_refused_spelling_is_refused_every_time_and_never_remembered() -> None:
    canonical_host.cache_clear()
    for _ in range(2):
        with pytest.raises(HostError, match="internationalised"):
            canonical_host("xn--.com")
    assert canonical_host.cache_info().currsize == 0


def test_the_remembered_spellings_are_bounded() -> None:
    canonical_host.cache_clear()
    for n in range(HOST_CACHE_ENTRIES + 10):
        canonical_host(f"h{n}.example")
    assert canonical_host.cache_info().currsize == HOST_CACHE_ENTRIES
    assert canonical_host("h0.example") == Host("h0.example", None)  # evicted, made again


def test_error_message_does_not_echo_input() -> None:
    with pytest.raises(HostError) as caught:
        canonical_host("secret-token@example.com")
    assert "secret" not in str(caught.value)


CONFIG_NAMES = [
    pytest.param("API.Example.com.", "api.example.com", id="case-and-dot"),
    pytest.param("bücher.example", "xn--bcher-kva.example", id="idn"),
    pytest.param("127.0.0.1", "127.0.0.1", id="numbers-not-interpreted"),
    pytest.param("example.123", "example.123", id="numeric-tld-kept"),
]


@pytest.mark.parametrize(("raw", "expected"), CONFIG_NAMES)
def test_canonical_name(raw: str, expected: str) -> None:
    assert canonical_name(raw) == expected


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        pytest.param("*.example.com", "invalid character", id="wildcard-not-stripped"),
        pytest.param("a..b", "empty label", id="empty-label"),
        pytest.param("::1", "invalid character", id="ipv6"),
        pytest.param("", "empty host", id="empty"),
        pytest.param("a b", "whitespace", id="space"),
    ],
)
def test_canonical_name_refuses(raw: str, problem: str) -> None:
    with pytest.raises(HostError, match=problem):
        canonical_name(raw)


AUTHORITIES = [
    pytest.param("example.com", 443, "example.com", 443, id="default-port"),
    pytest.param("Example.COM:8080", None, "example.com", 8080, id="port"),
    pytest.param("example.com.:80", None, "example.com", 80, id="trailing-dot-port"),
    pytest.param("a.com:1", None, "a.com", 1, id="port-min"),
    pytest.param("a.com:65535", None, "a.com", 65535, id="port-max"),
    pytest.param("a.com:0080", None, "a.com", 80, id="port-leading-zeros"),
    pytest.param("127.1:22", None, "127.0.0.1", 22, id="v4-short-port"),
    pytest.param("2130706433:80", None, "127.0.0.1", 80, id="v4-decimal-port"),
    pytest.param("[::1]", 443, "::1", 443, id="v6-default-port"),
    pytest.param("[::1]:8443", None, "::1", 8443, id="v6-port"),
    pytest.param("[::ffff:127.0.0.1]:80", None, "::ffff:7f00:1", 80, id="v6-mapped-port"),
    pytest.param("::1", 80, "::1", 80, id="v6-bare-default-port"),
    pytest.param("::1:80", 443, "::1:80", 443, id="v6-bare-never-has-port"),
    pytest.param("bücher.example:443", None, "xn--bcher-kva.example", 443, id="idn-port"),
]


@pytest.mark.parametrize(("raw", "default", "host", "port"), AUTHORITIES)
def test_authorities(raw: str, default: int | None, host: str, port: int) -> None:
    parsed_host, parsed_port = parse_authority(raw, default)
    assert (str(parsed_host), parsed_port) == (host, port)
    assert parsed_host == canonical_host(host)


REFUSED_AUTHORITIES = [
    pytest.param("example.com", "missing port", id="no-port-no-default"),
    pytest.param("[::1]", "missing port", id="v6-no-port-no-default"),
    pytest.param("a.com:0", "out of range", id="port-zero"),
    pytest.param("a.com:65536", "out of range", id="port-too-big"),
    pytest.param("a.com:000065535", "out of range", id="port-too-many-digits"),
    pytest.param("a.com:+80", "not a decimal", id="port-plus"),
    pytest.param("a.com:-1", "not a decimal", id="port-negative"),
    pytest.param("a.com: 80", "whitespace", id="port-space"),
    pytest.param("a.com:80a", "not a decimal", id="port-suffix"),
    pytest.param("a.com:0x50", "not a decimal", id="port-hex"),
    pytest.param("a.com:\u0668\u0660", "not a decimal", id="port-arabic-digits"),
    pytest.param("a.com:", "empty port", id="port-empty"),
    pytest.param("[::1]:", "empty port", id="v6-port-empty"),
    pytest.param(":80", "empty host", id="host-empty"),
    pytest.param("", "empty host", id="empty"),
    pytest.param("user@a.com:80", "userinfo", id="userinfo"),
    pytest.param("user:pw@a.com:80", "userinfo", id="userinfo-password"),
    pytest.param("[::1]80", "after ']'", id="v6-no-colon"),
    pytest.param("[::1]:80:81", "not a decimal", id="v6-two-ports"),
    pytest.param("[::1:80", "unbalanced", id="v6-unclosed"),
    pytest.param("[a.com]:80", "non-IPv6", id="brackets-around-name"),
    pytest.param("[fe80::1%25eth0]:80", "zone id", id="zone-id"),
    pytest.param("a.com:80\r\n", "CR/LF", id="crlf"),
    pytest.param("a..com:80", "empty label", id="empty-label"),
    pytest.param("1.2.3.999:80", "out of range", id="bad-v4"),
]


@pytest.mark.parametrize(("raw", "problem"), REFUSED_AUTHORITIES)
def test_refused_authorities(raw: str, problem: str) -> None:
    with pytest.raises(HostError, match=problem):
        parse_authority(raw, None if "missing port" in problem else 443)


@pytest.mark.parametrize(
    ("name", "ip"),
    [
        pytest.param(None, None, id="neither"),
        pytest.param("a.com", IPv4Address("1.2.3.4"), id="both"),
    ],
)
def test_host_has_exactly_one_of_name_and_ip(
    name: str | None, ip: IPv4Address | IPv6Address | None
) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Host(name, ip)


# Text that looks like hosts: the parser's interesting characters, plus anything at all.
HOSTISH = st.text(alphabet="0123456789abcdefxX.:[]%@ \x00\u00ad\uff0eü-_", max_size=40)
LABEL = st.text(alphabet="aZ09-_üßÉ한ｅ́‍", min_size=1, max_size=8)
NAMELIKE = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
ANY_TEXT = st.one_of(st.text(max_size=60), HOSTISH, NAMELIKE)


@settings(max_examples=300)
@given(ANY_TEXT)
def test_canonical_host_raises_only_host_error_and_is_idempotent(raw: str) -> None:
    try:
        host = canonical_host(raw)
    except HostError:
        return
    assert canonical_host(str(host)) == host
    if host.name is not None:
        assert canonical_name(host.name) == host.name


@settings(max_examples=300)
@given(ANY_TEXT, st.sampled_from([None, 443]))
def test_parse_authority_raises_only_host_error(raw: str, default: int | None) -> None:
    try:
        host, port = parse_authority(raw, default)
    except HostError:
        return
    assert 1 <= port <= 65535
    assert canonical_host(str(host)) == host


@settings(max_examples=200)
@given(st.ip_addresses())
def test_every_address_round_trips(ip: IPv4Address | IPv6Address) -> None:
    assert canonical_host(str(ip)) == Host(None, ip)
    bracketed = f"[{ip}]" if ip.version == 6 else str(ip)
    assert parse_authority(f"{bracketed}:443") == (Host(None, ip), 443)
