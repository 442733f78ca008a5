"""Host canonicalisation: one spelling for every way a sandbox can write a destination.

Everything that compares hosts (allowlist matching, Host/SNI agreement, the loopback
refusal) works on the `Host` values made here, never on raw strings.

Invariants:
* A `Host` has exactly one of `name` (lowercase, IDNA A-labels, no trailing dot, labels of
  1-63 characters from ``[a-z0-9_-]``, at most 253 characters, last label not numeric) and
  `ip` (an `ipaddress` value; IPv6 keeps any IPv4 it embeds, see `proxy.addresses`).
* Every numeric IPv4 spelling that a resolver or a browser accepts (``2130706433``,
  ``0x7f000001``, ``0177.0.0.1``, ``127.1``, ``127.0.0.1.``) becomes the address it denotes,
  following the WHATWG URL host parser: if the last label is a number the whole host must
  be IPv4, otherwise it is refused (``example.123``, ``1.2.3.999``).
* Zone ids, userinfo, percent signs, whitespace and control characters, empty labels and
  stray brackets are refused, never repaired. `HostError` messages never echo the input.
* ``canonical_host(str(h)) == h`` for every host this module returns.
* Pure Python: no mitmproxy, no DNS, no I/O.
"""

from __future__ import annotations

import functools
import ipaddress
import unicodedata
from dataclasses import dataclass

import idna

from sandbox_egress.common.invariant import InvariantError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63
# Far above any valid host; bounds the work done on hostile input before it is refused.
MAX_RAW_LENGTH = 1024
# Spellings remembered by `canonical_host` (a pure function): every kept-alive request
# names its host again (issue 36). Bounded, least recently used first out; a refusal
# (`HostError`) is never remembered.
HOST_CACHE_ENTRIES = 4096

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_DIGITS = {10: frozenset("0123456789"), 8: frozenset("01234567"), 16: frozenset("0123456789abcdef")}


class HostError(ValueError):
    """A host or authority that cannot be canonicalised; the message is short and safe to log."""


@dataclass(frozen=True, slots=True)
class Host:
    """A canonical destination host: a DNS name or an IP address, never both."""

    name: str | None
    ip: IPAddress | None

    def __post_init__(self) -> None:
        if (self.name is None) == (self.ip is None):
            raise ValueError("a Host has exactly one of name and ip")

    def __str__(self) -> str:
        if self.name is not None:
            return self.name
        if self.ip is None:
            raise InvariantError("a Host has exactly one of name and ip")
        return self.ip.compressed


@functools.lru_cache(maxsize=HOST_CACHE_ENTRIES)
def canonical_host(raw: str) -> Host:
    """Canonicalise a bare host (no port): a DNS name, an IPv4 spelling, or [bracketed] IPv6."""
    _check_characters(raw)
    if raw.startswith("["):
        if not raw.endswith("]") or "[" in raw[1:] or "]" in raw[:-1]:
            raise HostError("unbalanced brackets")
        return Host(None, _ipv6(raw[1:-1], "brackets around a non-IPv6 host"))
    if "[" in raw or "]" in raw:
        raise HostError("unbalanced brackets")
    if ":" in raw:
        return Host(None, _ipv6(raw, "invalid IPv6 address"))
    labels = _mapped_labels(raw)
    if _ends_in_number(labels):
        return Host(None, _ipv4(labels))
    return Host(_encode_labels(labels), None)


def canonical_name(raw: str) -> str:
    """Canonicalise a DNS name from configuration (an exact entry, or a wildcard's suffix).

    Same steps as for a name in `canonical_host`: case folding, one trailing dot stripped,
    UTS46 mapping and IDNA A-labels, length and character checks. It works label by label
    and does not interpret numbers, so ``"127.0.0.1"`` comes back unchanged: callers decide
    whether a configuration value is an IP literal before calling this.
    """
    _check_characters(raw)
    return _encode_labels(_mapped_labels(raw))


def parse_authority(raw: str, default_port: int | None = None) -> tuple[Host, int]:
    """Split ``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` and canonicalise both parts.

    Without a port the result carries `default_port`; with none given that is an error.
    A bare IPv6 address is taken whole as the host, so it can never carry a port
    (``::1:80`` is the address ``::1:80``, not ``::1`` port 80).
    """
    _check_characters(raw)
    port: str | None = None
    if raw.startswith("["):
        close = raw.find("]")
        host, rest = (raw, "") if close < 0 else (raw[: close + 1], raw[close + 1 :])
        if rest:
            if not rest.startswith(":"):
                raise HostError("unexpected characters after ']'")
            port = rest[1:]
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    else:
        host = raw
    if port is None:
        if default_port is None:
            raise HostError("missing port")
        return canonical_host(host), default_port
    return canonical_host(host), _port(port)


def _port(raw: str) -> int:
    if not raw:
        raise HostError("empty port")
    if not (raw.isascii() and raw.isdigit()):
        raise HostError("port is not a decimal number")
    if len(raw) > 5 or not 1 <= int(raw) <= 65535:
        raise HostError("port out of range")
    return int(raw)


def _check_characters(raw: str) -> None:
    if not raw:
        raise HostError("empty host")
    if len(raw) > MAX_RAW_LENGTH:
        raise HostError("host too long")
    if "%" in raw:
        raise HostError("zone id or percent-encoding not allowed")
    if "@" in raw:
        raise HostError("userinfo not allowed")
    if "\x00" in raw:
        raise HostError("NUL not allowed")
    if "\r" in raw or "\n" in raw:
        raise HostError("CR/LF not allowed")
    if raw.isascii():
        # In ASCII the control characters are exactly the unprintable ones, and the only
        # printable whitespace is the space: one pass in C instead of one per character.
        if not raw.isprintable() or " " in raw:
            raise HostError("whitespace or control character not allowed")
    elif any(c.isspace() or unicodedata.category(c) == "Cc" for c in raw):
        raise HostError("whitespace or control character not allowed")


def _ipv6(raw: str, problem: str) -> ipaddress.IPv6Address:
    try:
        return ipaddress.IPv6Address(raw)
    except ValueError:
        raise HostError(problem) from None


def _mapped_labels(raw: str) -> list[str]:
    """UTS46-map (case folding, fullwidth forms and dots) and split, one trailing dot dropped."""
    if raw.isascii():
        mapped = raw.lower()
    else:
        try:
            mapped = idna.uts46_remap(raw, std3_rules=False, transitional=False)
        except UnicodeError:
            raise HostError("invalid internationalised name") from None
    labels = mapped.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    if "" in labels:
        raise HostError("empty label")
    return labels


def _ends_in_number(labels: list[str]) -> bool:
    last = labels[-1]
    return all(c in _DIGITS[10] for c in last) or _ipv4_number(last) is not None


def _ipv4_number(part: str) -> int | None:
    """One WHATWG IPv4 part: decimal, ``0x`` hex or ``0``-leading octal; None if it is not."""
    radix = 10
    if part.startswith(("0x", "0X")):
        part, radix = part[2:], 16
    elif len(part) > 1 and part.startswith("0"):
        part, radix = part[1:], 8
    if not all(c in _DIGITS[radix] for c in part.lower()):
        return None
    digits = part.lstrip("0")
    if len(digits) > 32:  # more than 32 bits in any radix: out of range, skip the big int
        return 1 << 32
    return int(digits, radix) if digits else 0


def _ipv4(labels: list[str]) -> ipaddress.IPv4Address:
    if len(labels) > 4:
        raise HostError("too many parts in IPv4 address")
    numbers = [_ipv4_number(label) for label in labels]
    if any(n is None for n in numbers):
        raise HostError("invalid IPv4 address")
    *leading, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise HostError("IPv4 address part out of range")
    value = last
    for i, n in enumerate(leading):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _encode_labels(labels: list[str]) -> str:
    encoded = [_encode_label(label) for label in labels]
    name = ".".join(encoded)
    if len(name) > MAX_NAME_LENGTH:
        raise HostError("name too long")
    return name


def _encode_label(label: str) -> str:
    try:
        if not label.isascii():
            label = idna.alabel(label).decode("ascii")
        elif label.startswith("xn--") and idna.alabel(idna.ulabel(label)).decode() != label:
            raise HostError("non-canonical punycode label")
    except UnicodeError:  # idna.IDNAError and the codecs' own errors
        raise HostError("invalid internationalised label") from None
    if len(label) > MAX_LABEL_LENGTH:
        raise HostError("label too long")
    if not _NAME_CHARS.issuperset(label):
        raise HostError("invalid character in name")
    return label
