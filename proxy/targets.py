"""Which host a request is for, and whether every name it carries agrees
(docs/configuration.md#modes-and-protocols).

A request can name its destination up to five times: the request-target's authority
(an HTTP/1 absolute-form URL, or an HTTP/2 `:path` that is not origin-form), the URL
mitmproxy parsed (or, in transparent mode, the original destination address), the
Host/:authority header, the TLS SNI, and the connection's target (the CONNECT
authority, or the SNI in transparent mode). Domain fronting is any disagreement among
them. An origin server must route on the absolute-form target and ignore Host (RFC 9112
3.2.2), so the target's authority is checked like a Host header, and upstreams always
receive origin-form (docs/decisions.md D20).

`locate` is pure: it takes those names as plain values and returns where to send the
request (host, port, and the origin-form request-target), or the reason to refuse.
Invariant: a target that is neither origin-form, nor absolute-form naming the decided
host, nor `*` for OPTIONS is never located.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandbox_egress.proxy.decision import Reason
from sandbox_egress.proxy.hosts import Host, HostError, canonical_host, parse_authority


@dataclass(frozen=True, slots=True)
class RequestNames:
    transparent: bool
    host: str  # the request's host as mitmproxy parsed it (transparent: the original destination)
    port: int
    host_header: str | None
    sni: str | None
    client_tls: bool
    target: tuple[Host, int] | None  # what the connection was opened for, when known
    sni_malformed: bool = False  # the ClientHello carried a server_name that does not parse
    method: str = "GET"
    # The request-target. HTTP/1: `path` as mitmproxy split it, and the absolute-form
    # authority when mitmproxy kept it (inside a tunnel, in transparent mode). HTTP/2:
    # `:path` exactly as sent, and no target_authority.
    path: str = "/"
    target_authority: str = ""
    # HTTP/2: the `host` fields sent beside a `:authority` (host_header is the latter).
    # mitmproxy forwards them as the upstream's Host, so each must agree too (D35).
    host_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Location:
    host: Host
    port: int
    path: str  # the origin-form target to send upstream (or `*` for OPTIONS)
    authority: str = ""  # the absolute-form target's authority as sent; "" for origin-form


# RFC 3986 3.1 scheme, then "//" authority, then the rest up to an (invalid) fragment.
_ABSOLUTE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)")
_SCHEMES = frozenset({"http", "https"})


def request_target(method: str, path: str, target_authority: str = "") -> tuple[str, str] | None:
    """(authority, origin-form target) of a request-target, or None when it is none of
    origin-form, absolute-form (http/https) or `*` for OPTIONS.

    The authority is "" for origin- and asterisk-form. Only visible US-ASCII other than
    `#` may appear in the target (RFC 9112 3.2; a fragment is never sent).
    """
    authority = target_authority
    origin = path
    if not authority and not path.startswith("/") and path != "*":
        absolute = _ABSOLUTE.fullmatch(path)
        if absolute is None or absolute["scheme"].lower() not in _SCHEMES:
            return None
        authority, rest = absolute["authority"], absolute["rest"]
        if not authority or (rest and rest[0] not in "/?"):
            return None
        if not rest and method == "OPTIONS":
            origin = "*"  # RFC 9112 3.2.4: OPTIONS to "http://host" is forwarded as "*"
        else:
            origin = rest if rest.startswith("/") else "/" + rest
    if origin == "*":
        return (authority, origin) if method == "OPTIONS" else None
    if not origin.startswith("/") or not all("!" <= c <= "~" and c != "#" for c in origin):
        return None
    return authority, origin


def locate(names: RequestNames) -> Location | Reason:
    """Regular mode: the URL (or, in a tunnel, the Host mitmproxy parsed) and the Host
    header must agree and, in a tunnel, name the CONNECT target. Transparent mode: the
    Host header (without one, the target's authority) names the host (the original
    destination address is not trusted) and, over TLS, must agree with the SNI. The
    target's authority must name the same host. A Host header or target authority
    without a port inside a tunnel takes the tunnel's port; one with another port is a
    mismatch. An SNI that does not parse is `bad_request` (D23).
    """
    if names.sni_malformed:
        return Reason.BAD_REQUEST
    target_form = request_target(names.method, names.path, names.target_authority)
    if target_form is None:
        return Reason.BAD_REQUEST
    authority, origin = target_form
    if names.host_header == "" or len(names.host_fields) > 1 or "" in names.host_fields:
        return Reason.BAD_REQUEST  # RFC 9112 3.2: never empty for http(s); one Host only
    ports: list[int] = []  # explicit ports of the Host header and the target's authority
    named: list[Host] = []
    try:
        for text in (names.host_header, authority, *names.host_fields):
            if text:
                name, port = parse_authority(text, 0)
                named.append(name)
                ports.append(port)
        sni = canonical_host(names.sni) if names.sni else None
        if names.transparent:
            fallback = names.target[0] if names.target else canonical_host(names.host)
            host = named[0] if named else fallback
        else:
            host = canonical_host(names.host)
    except HostError:
        return Reason.BAD_REQUEST
    if sni is not None and names.target is not None and sni != names.target[0]:
        return Reason.HOST_MISMATCH
    if any(name != host for name in named):
        return Reason.HOST_MISMATCH
    if names.target is not None:
        target, target_port = names.target
        if host != target or any(port not in (0, target_port) for port in ports):
            return Reason.HOST_MISMATCH
        return Location(host, target_port, origin, authority)
    if any(port not in (0, names.port) for port in ports):
        return Reason.HOST_MISMATCH
    if names.client_tls and names.transparent:
        return Reason.BAD_REQUEST  # TLS whose ClientHello named nothing usable
    return Location(host, names.port, origin, authority)


def upstream_authority(host: Host, port: int, scheme: str) -> str:
    """The Host/:authority an upstream receives for a located request (D35): the decided
    host in its canonical spelling, bracketed when IPv6, with the port unless it is the
    scheme's default. Never a spelling of the sandbox's."""
    name = f"[{host}]" if host.ip is not None and host.ip.version == 6 else str(host)
    default = 443 if scheme == "https" else 80
    return name if port == default else f"{name}:{port}"
