"""The proxy's own endpoints and this host's addresses, refused as destinations
(docs/configuration.md#destinations-always-refused).

No request loops through the proxy: its listening and metrics endpoints are refused in
every spelling of their address — the address itself, and any IPv6 form that carries
it (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible, NAT64, 6to4, Teredo;
`proxy.addresses.embedded_ipv4`), since a dual-stack socket connected to
`::ffff:a.b.c.d` reaches `a.b.c.d`. An endpoint given as a name is resolved once, at
start, to every address it names. An endpoint bound to the wildcard (0.0.0.0, ::)
matches its port on *any* address of this host.

Whether an address is local is asked of the kernel (a bind to it succeeds only if it
is), so addresses added after start are covered too. `is_local` answers that for any
address, for the policy's rule that this host's addresses are refused unless a
single-address entry opens them (docs/decisions.md D22). It is asked for every address a
request is decided on, so each answer is kept for `LOCAL_CACHE_S` (a bounded cache): an
address added to or removed from the host is seen within that time, and a kept-alive
upstream costs no system call per request.

Invariant: `(ip, port) in self_addresses` is True for every spelling of every
endpoint the proxy serves.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from collections.abc import Callable, Iterable

from sandbox_egress.proxy.addresses import match_candidates
from sandbox_egress.proxy.hosts import IPAddress

Resolve = Callable[[str, int], list[IPAddress]]
LOCAL_CACHE_S = 1.0
LOCAL_CACHE_ENTRIES = 4096


class SelfAddressError(Exception):
    """An endpoint's name does not resolve: the proxy cannot know what it must refuse."""


def resolve_endpoint(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise SelfAddressError(f"cannot resolve {host!r}: {exc}") from exc
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]


class SelfAddresses:
    def __init__(
        self,
        endpoints: Iterable[tuple[str, int]] = (),
        resolve: Resolve = resolve_endpoint,
        probe: Callable[[IPAddress], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe or is_local_address
        self._clock = clock
        self._local: dict[IPAddress, tuple[float, bool]] = {}  # ip -> (valid until, answer)
        self._exact: set[tuple[IPAddress, int]] = set()
        self._any_address_ports: set[int] = set()
        for host, port in endpoints:
            try:
                addresses: list[IPAddress] = [ipaddress.ip_address(host)]
            except ValueError:
                addresses = resolve(host, port)  # a name: what it names at start
            for ip in addresses:
                if ip.is_unspecified:
                    self._any_address_ports.add(port)
                else:
                    self._exact.update((candidate, port) for candidate in match_candidates(ip))

    def __contains__(self, destination: object) -> bool:
        if not isinstance(destination, tuple) or len(destination) != 2:
            return False
        ip, port = destination
        candidates = match_candidates(ip)
        if any((candidate, port) in self._exact for candidate in candidates):
            return True
        return port in self._any_address_ports and self.is_local(ip)

    def is_local(self, ip: IPAddress) -> bool:
        """Whether `ip`, or an IPv4 address it carries, is an address of this host."""
        return any(self._local_address(candidate) for candidate in match_candidates(ip))

    def _local_address(self, ip: IPAddress) -> bool:
        now = self._clock()
        cached = self._local.get(ip)
        if cached is not None and cached[0] > now:
            return cached[1]
        answer = self._probe(ip)
        if len(self._local) >= LOCAL_CACHE_ENTRIES:
            self._local.clear()  # bounded; a full cache is rare and refills in a second
        self._local[ip] = (now + LOCAL_CACHE_S, answer)
        return answer


def is_local_address(ip: IPAddress) -> bool:
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EINVAL, errno.EAFNOSUPPORT):
                return False
            raise
    return True
