"""The two network namespaces of a benchmark run.

    namespace <tag>c ("client"): the load generator and the three proxies, which
        listen on its loopback; reaches the upstream over a veth.
        198.18.77.1/30
          | veth
        198.18.77.2/30
    namespace <tag>u ("upstream"): nginx and the upload sink.

Invariants:
* Nothing is added to the root namespace: both ends of the veth live in namespaces
  this run created, so the addresses cannot clash with anything else on the host,
  and no traffic leaves the machine (no namespace has a default route).
* Names resolve only from /etc/netns/<tag>c/hosts (bind-mounted over /etc/hosts by
  `ip netns exec`); its resolv.conf points at 127.0.0.1 where nothing listens.
* Everything created is registered for removal as soon as it exists, and `close()`
  removes it even after a partial set-up (`testbed.netns.Namespaces`).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed import netns, nsock

CLIENT_SIDE_IP = "198.18.77.1"
UPSTREAM_IP = "198.18.77.2"


@dataclass
class Namespaces(netns.Namespaces):
    @property
    def client(self) -> str:
        return f"{self.tag}c"

    @property
    def upstream(self) -> str:
        return f"{self.tag}u"

    def build(self, hosts: dict[str, str]) -> None:
        """Create both namespaces and the veth; `hosts` maps names to addresses in C."""
        self.add_namespaces(self.client, self.upstream)
        c, u = f"{self.tag}x", f"{self.tag}y"
        self.add_veth(self.client, c, self.upstream, u)
        self.link_up(self.client, c, f"{CLIENT_SIDE_IP}/30")
        self.link_up(self.upstream, u, f"{UPSTREAM_IP}/30")
        self.write_etc(
            self.client, [(address, name) for name, address in hosts.items()], "127.0.0.1"
        )
        self.check_no_default_route(self.client, self.upstream)


def port_open(ns: str, host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port inside namespace `ns`."""
    try:
        nsock.connect(ns, (host, port), timeout=1.0).close()
    except OSError:
        return False
    return True
