"""Name resolution for the proxy: the system resolver, answers in its order.

Uses getaddrinfo, so /etc/hosts, nsswitch and resolv.conf apply exactly as for
any other program on the host (SPEC 5). The caller checks every answer and
pins the one it connects to; nothing here is trusted beyond parsing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from proxy.hosts import IPAddress


async def system_resolve(name: str, port: int) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    seen: dict[IPAddress, None] = {}
    for _family, _type, _proto, _canonical, sockaddr in infos:
        # A link-local IPv6 answer carries a scope id ("fe80::1%eth0"); the address decides.
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]), None)
    return list(seen)
