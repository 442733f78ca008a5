"""Network namespaces for the end-to-end tests: the sandbox, the proxy and the upstreams.

    root namespace (pytest = the sandbox client)
        <tag>a  198.19.S.1/30
          | veth
        <tag>b  198.19.S.2/30   namespace <tag>p: the proxy, a trap on [::]:80/443/8443
        <tag>c  198.18.1.1/30
          | veth
        <tag>d  198.18.1.2/30   namespace <tag>u: HTTP/HTTPS echo servers
                198.18.2.2/32   (an "internal" address no allowlist entry opens: a trap)

Invariants:
* The root namespace gets one /30 and no other route; its subnet is picked per run
  (from 198.19.0.0/16, skipping any already present) so concurrent runs do not clash.
  The client only ever talks to the two addresses of that /30.
* The proxy namespace resolves names only from /etc/netns/<tag>p/hosts; its resolv.conf
  points at 127.0.0.1 where nothing listens, so no DNS query leaves it. Neither the
  proxy nor the upstream namespace has a default route.
* Everything created (namespaces, veths, /etc/netns/<ns> directories) is registered for
  removal as soon as it exists, and removed by `close()` even after a partial set-up.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")
CMD_TIMEOUT = 15.0

P_UPLINK = "198.18.1.1"
UPSTREAM_IP = "198.18.1.2"
INTERNAL_IP = "198.18.2.2"


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), check=check, capture_output=True, text=True, timeout=CMD_TIMEOUT
    )


def netns_available() -> str | None:
    """Why these tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2)"
    return None


def _pick_client_subnet() -> ipaddress.IPv4Network:
    used = run("ip", "-4", "-o", "addr", "show").stdout + run("ip", "-4", "route", "show").stdout
    start = os.getpid() % 16384
    for offset in range(16384):
        index = (start + offset) % 16384
        net = ipaddress.IPv4Network((int(ipaddress.IPv4Address("198.19.0.0")) + 4 * index, 30))
        if all(str(a) not in used for a in net) and str(net) not in used:
            return net
    raise RuntimeError("no free /30 in 198.19.0.0/16")


@dataclass
class Namespaces:
    """What a topology creates (namespaces, veths, /etc/netns files), and how to undo it.

    Every step is registered for undoing as soon as it exists; `close()` undoes them
    newest first, even after a partial set-up. The topologies here, in
    `testbed.transparent` and in `bench.netns` build on it.
    """

    tag: str
    _undo: list[tuple[str, list[str]]] = field(default_factory=list)

    def exec_prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def _register(self, what: str, *cmd: str) -> None:
        self._undo.append((what, list(cmd)))

    def add_namespaces(self, *names: str) -> None:
        """Create the namespaces (none may exist yet), each with its loopback up."""
        existing = run("ip", "netns", "list").stdout.split()
        for ns in names:
            if ns in existing:
                raise RuntimeError(f"namespace {ns} already exists (left over by a dead run?)")
        for ns in names:
            run("ip", "netns", "add", ns)
            self._register(f"namespace {ns}", "ip", "netns", "del", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def add_veth(self, ns: str | None, name: str, peer_ns: str, peer: str) -> None:
        """A veth pair: `name` in `ns` (None: the root namespace), `peer` in `peer_ns`.

        Only a pair with an end in the root namespace needs removing of its own;
        deleting the namespaces takes the others with them."""
        where = [] if ns is None else ["-n", ns]
        run(
            "ip",
            *where,
            "link",
            "add",
            name,
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            peer_ns,
        )
        if ns is None:
            self._register(f"veth {name}", "ip", "link", "del", name)

    def link_up(self, ns: str | None, dev: str, *cidrs: str) -> None:
        """Give `dev` in `ns` (None: the root namespace) these addresses, and bring it up."""
        where = [] if ns is None else ["-n", ns]
        for cidr in cidrs:
            run("ip", *where, "addr", "add", cidr, "dev", dev)
        run("ip", *where, "link", "set", dev, "up")

    def write_etc(self, ns: str, hosts: list[tuple[str, str]], resolver: str) -> None:
        """/etc/netns/<ns>/hosts (localhost plus these (address, name) pairs) and a
        resolv.conf naming only `resolver`; `ip netns exec` bind-mounts both."""
        if not NETNS_ETC.exists():
            NETNS_ETC.mkdir()
            self._register(
                f"directory {NETNS_ETC}", "rmdir", "--ignore-fail-on-non-empty", str(NETNS_ETC)
            )
        etc = NETNS_ETC / ns
        etc.mkdir()
        self._register(f"directory {etc}", "rm", "-rf", "--", str(etc))
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{address} {name}" for address, name in hosts]
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        (etc / "resolv.conf").write_text(f"nameserver {resolver}\noptions timeout:1 attempts:1\n")

    def check_no_default_route(self, *names: str) -> None:
        for ns in names:
            routes = run("ip", "-n", ns, "route", "show").stdout
            if "default" in routes:
                raise RuntimeError(f"namespace {ns} has a default route: {routes!r}")

    def close(self) -> list[str]:
        """Undo everything, newest first; returns the steps that failed (after trying all)."""
        failures = []
        while self._undo:
            what, cmd = self._undo.pop()
            if cmd[:3] == ["ip", "link", "del"] and not self._link_exists(cmd[3]):
                continue  # deleting the namespace already took the veth pair with it
            try:
                result = run(*cmd, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{what}: {exc}")
                continue
            if result.returncode != 0:
                failures.append(f"{what}: {result.stderr.strip()}")
        return failures

    @staticmethod
    def _link_exists(name: str) -> bool:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            return run("ip", "link", "show", name, check=False).returncode == 0
        return True


@dataclass
class Topology(Namespaces):
    client_ip: str = ""
    proxy_ip: str = ""
    client_net: str = ""

    @property
    def ns_proxy(self) -> str:
        return f"{self.tag}p"

    @property
    def ns_upstream(self) -> str:
        return f"{self.tag}u"

    @property
    def veth_root(self) -> str:
        return f"{self.tag}a"

    def build(self, proxy_hosts: dict[str, list[str]]) -> None:
        """Create everything. `proxy_hosts` maps a name to the addresses it resolves to in P
        (the address "PROXY" stands for the proxy's own, picked here)."""
        p, u = self.ns_proxy, self.ns_upstream
        net = _pick_client_subnet()
        hosts = list(net.hosts())
        self.client_ip, self.proxy_ip, self.client_net = str(hosts[0]), str(hosts[1]), str(net)
        self.add_namespaces(p, u)

        a, b, c, d = (f"{self.tag}{x}" for x in "abcd")
        self.add_veth(None, a, p, b)
        self.link_up(None, a, f"{self.client_ip}/30")
        self.link_up(p, b, f"{self.proxy_ip}/30")

        self.add_veth(p, c, u, d)
        self.link_up(p, c, f"{P_UPLINK}/30")
        self.link_up(u, d, f"{UPSTREAM_IP}/30", f"{INTERNAL_IP}/32")
        run("ip", "-n", p, "route", "add", f"{INTERNAL_IP}/32", "via", UPSTREAM_IP)

        self.write_etc(
            p,
            [
                (self.proxy_ip if addr == "PROXY" else addr, name)
                for name, addrs in proxy_hosts.items()
                for addr in addrs
            ],
            resolver="127.0.0.1",
        )
        self._check_routing()

    def _check_routing(self) -> None:
        """The client's traffic to the proxy must use our veth, never the default route."""
        for ip in (self.proxy_ip,):
            out = run("ip", "-4", "route", "get", ip).stdout
            if f"dev {self.veth_root} " not in out + " ":
                raise RuntimeError(f"route to {ip} does not use {self.veth_root}: {out!r}")
        self.check_no_default_route(self.ns_proxy, self.ns_upstream)
