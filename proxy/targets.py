"""Which host a request is for, and whether every name it carries agrees (SPEC 1.6).

A request can name its destination up to four times: the absolute-form URL (or,
in transparent mode, the original destination address), the Host/:authority
header, the TLS SNI, and the connection's target (the CONNECT authority, or the
SNI in transparent mode). Domain fronting is any disagreement among them.

`locate` is pure: it takes those names as plain values and returns the host and
port to decide on, or the reason to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.decision import Reason
from proxy.hosts import Host, HostError, canonical_host, parse_authority


@dataclass(frozen=True, slots=True)
class RequestNames:
    transparent: bool
    host: str  # the request's host as mitmproxy parsed it (transparent: the original destination)
    port: int
    host_header: str | None
    sni: str | None
    client_tls: bool
    target: tuple[Host, int] | None  # what the connection was opened for, when known


def locate(names: RequestNames) -> tuple[Host, int] | Reason:
    """Regular mode: the URL (or, in a tunnel, the Host mitmproxy parsed) and the Host
    header must agree and, in a tunnel, name the CONNECT target. Transparent mode: the
    Host header names the host (the original destination address is not trusted) and,
    over TLS, must agree with the SNI. A Host header without a port inside a tunnel
    takes the tunnel's port; one with another port is a mismatch.
    """
    header_port = 0  # 0: the Host header carries no explicit port
    named: Host | None = None
    try:
        if names.host_header:
            named, header_port = parse_authority(names.host_header, 0)
        if names.transparent:
            fallback = names.target[0] if names.target else canonical_host(names.host)
            host = named or fallback
        else:
            host = canonical_host(names.host)
        if names.sni and names.target is not None and canonical_host(names.sni) != names.target[0]:
            return Reason.HOST_MISMATCH
    except HostError:
        return Reason.BAD_REQUEST
    if named is not None and named != host:
        return Reason.HOST_MISMATCH
    if names.target is not None:
        target, target_port = names.target
        if host != target or header_port not in (0, target_port):
            return Reason.HOST_MISMATCH
        return host, target_port
    if header_port and header_port != names.port:
        return Reason.HOST_MISMATCH
    if names.client_tls and names.transparent:
        return Reason.BAD_REQUEST  # TLS whose ClientHello named nothing usable
    return host, names.port
