"""The transparent-mode topology: a sandbox routed through a gateway that redirects its TCP.

    namespace <tag>s: the sandbox      198.18.10.2/30, default route via the gateway
          | veth  <tag>ss -- <tag>sg   (<tag>sg is SBX_IF of docs/operations.md)
    namespace <tag>g: the gateway      198.18.10.1/30; the transparent proxy on 0.0.0.0:8081,
                                       its metrics on 0.0.0.0:9464, a DNS server on :53
                                       198.18.11.1/30
          | veth  <tag>gu -- <tag>ug
    namespace <tag>u: the upstreams    198.18.11.2/30  the real upstream of every name
                                       198.18.12.2/32  a decoy the sandbox may aim at
                                       198.18.13.2/32, 198.18.13.3/32  opened by a CIDR entry

The gateway applies the iptables rules of docs/operations.md to SBX_IF, word for word
(IPv4 and IPv6), with forwarding switched on: what keeps the sandbox's UDP from reaching
an upstream is the FORWARD rule, as on a real host, not a missing sysctl.

Invariants:
* The root namespace gets nothing: no address, no route. The tests reach the sandbox
  and the gateway through sockets opened inside them (`testbed.nsock`).
* The gateway resolves names from /etc/netns/<tag>g/hosts first, then from the DNS
  server the tests run on its 127.0.0.1:53 (resolv.conf says so); the upstream
  namespace has no default route, the gateway none either.
* Everything created (namespaces, veths, /etc/netns/<ns> directories) is registered for
  removal as soon as it exists, and removed by `close()` even after a partial set-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.netns import Namespaces, run

GATEWAY_IP = "198.18.10.1"
SANDBOX_IP = "198.18.10.2"
GATEWAY_UPLINK = "198.18.11.1"
REAL_IP = "198.18.11.2"
DECOY_IP = "198.18.12.2"
OPEN_IP = "198.18.13.2"
OPEN_RAW_IP = "198.18.13.3"
OPEN_NET = "198.18.13.0/24"
PROXY_PORT = 8081
METRICS_PORT = 9464
RESOLVER = GATEWAY_IP


def firewall_rules(sbx_if: str) -> list[list[str]]:
    """The rules of docs/operations.md ("iptables"), with SBX_IF and RESOLVER filled in."""
    rules = f"""
iptables -t nat -A PREROUTING -i {sbx_if} -p tcp -j REDIRECT --to-ports {PROXY_PORT}
iptables -A INPUT -i {sbx_if} -p tcp --dport {PROXY_PORT} -j ACCEPT
iptables -A INPUT -i {sbx_if} -p udp -d {RESOLVER} --dport 53 -j ACCEPT
iptables -A INPUT -i {sbx_if} -p tcp -d {RESOLVER} --dport 53 -j ACCEPT
iptables -A INPUT -i {sbx_if} -j DROP
iptables -A FORWARD -i {sbx_if} -j DROP
ip6tables -t nat -A PREROUTING -i {sbx_if} -p tcp -j REDIRECT --to-ports {PROXY_PORT}
ip6tables -A INPUT -i {sbx_if} -p tcp --dport {PROXY_PORT} -j ACCEPT
ip6tables -A INPUT -i {sbx_if} -j DROP
ip6tables -A FORWARD -i {sbx_if} -j DROP
"""
    return [line.split() for line in rules.strip().splitlines()]


@dataclass
class TransparentTopology(Namespaces):
    @property
    def ns_sandbox(self) -> str:
        return f"{self.tag}s"

    @property
    def ns_gateway(self) -> str:
        return f"{self.tag}g"

    @property
    def ns_upstream(self) -> str:
        return f"{self.tag}u"

    @property
    def sbx_if(self) -> str:
        return f"{self.tag}sg"

    def build(self, gateway_hosts: dict[str, list[str]]) -> None:
        """Create everything; `gateway_hosts` maps a name to the addresses it has in G."""
        s, g, u = self.ns_sandbox, self.ns_gateway, self.ns_upstream
        self.add_namespaces(s, g, u)

        # Sandbox <-> gateway. The veths live inside the namespaces from the start, so
        # deleting the namespaces removes them; nothing is ever created in the root one.
        ss, sg, gu, ug = (f"{self.tag}{x}" for x in ("ss", "sg", "gu", "ug"))
        self.add_veth(g, sg, s, ss)
        self.link_up(g, sg, f"{GATEWAY_IP}/30")
        self.link_up(s, ss, f"{SANDBOX_IP}/30")
        run("ip", "-n", s, "route", "add", "default", "via", GATEWAY_IP)

        # Gateway <-> upstreams.
        self.add_veth(g, gu, u, ug)
        self.link_up(g, gu, f"{GATEWAY_UPLINK}/30")
        extras = (DECOY_IP, OPEN_IP, OPEN_RAW_IP)
        self.link_up(u, ug, f"{REAL_IP}/30", *(f"{extra}/32" for extra in extras))
        for extra in (DECOY_IP, OPEN_NET):
            run("ip", "-n", g, "route", "add", extra, "via", REAL_IP)
        # Replies to the sandbox would find their way back: only the firewall stops them.
        run("ip", "-n", u, "route", "add", f"{SANDBOX_IP}/32", "via", GATEWAY_UPLINK)
        run("ip", "netns", "exec", g, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        run("ip", "netns", "exec", g, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")

        for rule in firewall_rules(sg):
            run("ip", "netns", "exec", g, *rule)

        gateway_lines = [(addr, name) for name, addrs in gateway_hosts.items() for addr in addrs]
        self.write_etc(g, gateway_lines, resolver="127.0.0.1")
        self.write_etc(s, [], resolver=RESOLVER)
        self._check()

    def _check(self) -> None:
        """The root namespace must not have been touched, and the rules must be in place."""
        self.check_no_default_route(self.ns_gateway, self.ns_upstream)
        for name in (f"{self.tag}ss", f"{self.tag}sg", f"{self.tag}gu", f"{self.tag}ug"):
            if run("ip", "link", "show", name, check=False).returncode == 0:
                raise RuntimeError(f"{name} exists in the root namespace")
        nat = run("ip", "netns", "exec", self.ns_gateway, "iptables", "-t", "nat", "-S").stdout
        if f"--to-ports {PROXY_PORT}" not in nat:
            raise RuntimeError(f"REDIRECT rule missing: {nat!r}")
