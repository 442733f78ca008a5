"""How an https handler's request leaves: which proxy, and the CONNECT through it.

The conventions of curl and urllib, made explicit and testable:
* ``https_proxy`` wins over ``HTTPS_PROXY`` when both are set; an empty value
  means no proxy; a value without a scheme is taken as ``http://``; only an
  ``http://`` proxy (CONNECT over plain TCP) is supported;
* ``no_proxy`` wins over ``NO_PROXY``; entries are separated by commas or
  spaces; ``*`` bypasses the proxy for every host; ``example.com``,
  ``.example.com`` and ``*.example.com`` all match ``example.com`` and every
  name below it; an entry may carry ``:port``; an IP address or CIDR entry
  matches IP-literal hosts in it; names are never resolved to match an
  address entry; the host is already canonical (`hookrunner.handlerhost`) and
  a non-ASCII entry is compared in the same A-label spelling;
* the CONNECT handshake reads at most 64 KiB of response head, honours the
  caller's deadline on every read, and reports a refusal with the egress
  proxy's ``X-Egress-Denied`` code; the proxy's credentials (``Basic`` from
  the URL's user info) never appear in an error.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from sandbox_egress.proxy.hosts import HostError, canonical_name

_MAX_CONNECT_RESPONSE = 64 * 1024


class ProxyError(Exception):
    """The proxy cannot be used or broke the handshake; never mentions credentials."""


class ProxyConfigError(ProxyError, ValueError):
    """HTTPS_PROXY cannot be used."""


class ProxyRefused(ProxyError):
    """The proxy answered the CONNECT with a non-2xx status."""


@dataclass(frozen=True)
class ProxyRoute:
    proxy: bool
    proxy_host: str = ""
    proxy_port: int = 0
    proxy_user: str | None = None
    proxy_password: str | None = None


DIRECT = ProxyRoute(proxy=False)


@dataclass(frozen=True)
class ProxyProblem:
    """Why the proxy variable in effect cannot be used; safe to log (no credentials)."""

    variable: str  # "https_proxy" or "HTTPS_PROXY": the one that won
    reason: str


def _variable(environ: Mapping[str, str], name: str) -> str:
    """Which spelling of ``name`` is in effect: the lower-case one when it is set."""
    return name.lower() if name.lower() in environ else name.upper()


def _lookup(environ: Mapping[str, str], name: str) -> str:
    return environ.get(_variable(environ, name), "").strip()


def proxy_problem(
    environ: Mapping[str, str], targets: Iterable[tuple[str, int]]
) -> ProxyProblem | None:
    """The problem with the proxy setting if any of ``targets`` (canonical host, port) needs it.

    None when no proxy is set, when it is usable, or when ``no_proxy`` sends every
    target directly: then the setting is never parsed per call either.
    """
    proxy = _lookup(environ, "https_proxy")
    no_proxy = _lookup(environ, "no_proxy")
    if not proxy or all(bypasses(host, port, no_proxy) for host, port in targets):
        return None
    try:
        parse_proxy(proxy)
    except ProxyConfigError as exc:
        return ProxyProblem(_variable(environ, "https_proxy"), str(exc))
    return None


def route_for(host: str, port: int, environ: Mapping[str, str]) -> ProxyRoute:
    proxy = _lookup(environ, "https_proxy")
    if not proxy or bypasses(host, port, _lookup(environ, "no_proxy")):
        return DIRECT
    return parse_proxy(proxy)


def parse_proxy(value: str) -> ProxyRoute:
    if "://" not in value:
        value = f"http://{value}"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ProxyConfigError("HTTPS_PROXY is not a valid URL") from None
    if parts.scheme.lower() != "http":
        raise ProxyConfigError(f"HTTPS_PROXY scheme {parts.scheme!r} is not supported (use http)")
    if not parts.hostname:
        raise ProxyConfigError("HTTPS_PROXY has no host")
    return ProxyRoute(True, parts.hostname, port or 80, parts.username, parts.password)


def bypasses(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``no_proxy`` sends requests to ``host:port`` directly."""
    host = host.lower().rstrip(".")
    address = _address(host)
    for entry in (e for e in re.split(r"[,\s]+", no_proxy) if e):
        if entry == "*":
            return True
        pattern, entry_port = _split_port(entry.lower())
        if entry_port is not None and entry_port != port:
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(pattern, strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = _entry_domain(pattern.removeprefix("*").lstrip(".").rstrip("."))
        if domain and (host == domain or host.endswith(f".{domain}")):
            return True
    return False


def _entry_domain(name: str) -> str:
    """A ``no_proxy`` name in the spelling of `handler_host` (``straße.example`` as an A-label)."""
    if not name or name.isascii():
        return name
    try:
        return canonical_name(name)
    except HostError:
        return name  # matches nothing: hosts are A-labels by now


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6]:port or [v6]
        inside, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return inside, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else None
    return entry, None


def open_tunnel(
    raw: socket.socket,
    host: str,
    port: int,
    route: ProxyRoute,
    remaining: Callable[[], float],
) -> None:
    """CONNECT host:port through the proxy ``raw`` is connected to."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if route.proxy_user is not None:
        token = f"{unquote(route.proxy_user)}:{unquote(route.proxy_password or '')}"
        lines.append(f"Proxy-Authorization: Basic {base64.b64encode(token.encode()).decode()}")
    raw.settimeout(remaining())
    raw.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("ascii"))
    received = b""
    while b"\r\n\r\n" not in received:
        raw.settimeout(remaining())
        chunk = raw.recv(4096)
        if not chunk:
            raise ProxyError("the proxy closed the connection during CONNECT")
        received += chunk
        if len(received) > _MAX_CONNECT_RESPONSE:
            raise ProxyError("the proxy's CONNECT response is too large")
    head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
        raise ProxyError("the proxy sent a malformed CONNECT response")
    status = int(fields[1])
    if not 200 <= status < 300:
        denied = ""
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "x-egress-denied":
                code = "".join(c for c in value.strip() if c.isalnum() or c in "_-")[:64]
                denied = f" ({code})"
        raise ProxyRefused(f"the proxy refused CONNECT with {status}{denied}")
    if rest:
        raise ProxyError("the proxy sent data before the TLS handshake")
