"""The proxy's own endpoints, refused as destinations (no request loops, SPEC 1.3).

An endpoint bound to a specific address matches that address and port. An
endpoint bound to the wildcard (0.0.0.0, ::) matches its port on *any* address
of this host; whether an address is local is asked of the kernel (a bind to it
succeeds only if it is), so addresses added after start are covered too.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable

from proxy.hosts import IPAddress


class SelfAddresses:
    def __init__(self, endpoints: Iterable[tuple[str, int]] = ()) -> None:
        self._exact: set[tuple[IPAddress, int]] = set()
        self._any_address_ports: set[int] = set()
        for host, port in endpoints:
            try:
                ip = ipaddress.ip_address(host)
            except ValueError:
                continue  # a host name: resolved by the OS at bind time, matched by port below
            if ip.is_unspecified:
                self._any_address_ports.add(port)
            else:
                self._exact.add((ip, port))

    def __contains__(self, destination: object) -> bool:
        if not isinstance(destination, tuple) or len(destination) != 2:
            return False
        ip, port = destination
        if (ip, port) in self._exact:
            return True
        return port in self._any_address_ports and is_local_address(ip)


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
