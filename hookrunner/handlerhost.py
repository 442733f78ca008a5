"""An https handler URL's host, spelled exactly as the egress proxy canonicalises it.

One encoder for both halves of the product: the host an http hook CONNECTs to,
resolves, sends as TLS SNI and as ``Host`` is `proxy.hosts.canonical_host` of the
URL's host as written (UTS 46 non-transitional mapping, IDNA 2008 A-labels, the
WHATWG IPv4 reading). Python's ``idna`` codec (IDNA 2003) is never used: it maps
``straße.example`` to ``strasse.example``, another domain than the allowlist
entry ``straße.example`` names (``xn--strae-oqa.example``).

Invariants: pure (no I/O); a host the proxy would refuse raises `HostError`
(a `ValueError` whose message never echoes the input).
"""

from __future__ import annotations

from urllib.parse import SplitResult

from sandbox_egress.proxy.hosts import HostError, canonical_host

__all__ = ["HostError", "handler_host"]


def handler_host(parts: SplitResult) -> str:
    """The canonical host of a split URL: an A-label name, dotted IPv4 or bare IPv6."""
    return str(canonical_host(_written_host(parts.netloc)))


def _written_host(netloc: str) -> str:
    """The host as written (case and Unicode untouched): no userinfo, no port."""
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        close = hostport.find("]")
        return hostport if close < 0 else hostport[: close + 1]
    return hostport.partition(":")[0]
