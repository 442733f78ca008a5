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
  removes it even after a partial set-up.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")
CMD_TIMEOUT = 15.0
CLIENT_SIDE_IP = "198.18.77.1"
UPSTREAM_IP = "198.18.77.2"

_setns_lock = threading.Lock()


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), check=check, capture_output=True, text=True, timeout=CMD_TIMEOUT
    )


@dataclass
class Namespaces:
    tag: str
    _undo: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def client(self) -> str:
        return f"{self.tag}c"

    @property
    def upstream(self) -> str:
        return f"{self.tag}u"

    def prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def build(self, hosts: dict[str, str]) -> None:
        """Create both namespaces and the veth; `hosts` maps names to addresses in C."""
        existing = run("ip", "netns", "list").stdout.split()
        for ns in (self.client, self.upstream):
            if ns in existing:
                raise RuntimeError(f"namespace {ns} already exists (left over by a dead run?)")
        for ns in (self.client, self.upstream):
            run("ip", "netns", "add", ns)
            self._undo.append((f"namespace {ns}", ["ip", "netns", "del", ns]))
            run("ip", "-n", ns, "link", "set", "lo", "up")
        c, u = f"{self.tag}x", f"{self.tag}y"
        run("ip", "-n", self.client, "link", "add", c, "type", "veth", "peer", "name", u)
        run("ip", "-n", self.client, "link", "set", u, "netns", self.upstream)
        run("ip", "-n", self.client, "addr", "add", f"{CLIENT_SIDE_IP}/30", "dev", c)
        run("ip", "-n", self.upstream, "addr", "add", f"{UPSTREAM_IP}/30", "dev", u)
        run("ip", "-n", self.client, "link", "set", c, "up")
        run("ip", "-n", self.upstream, "link", "set", u, "up")

        if not NETNS_ETC.exists():
            NETNS_ETC.mkdir()
            self._undo.append(
                (str(NETNS_ETC), ["rmdir", "--ignore-fail-on-non-empty", str(NETNS_ETC)])
            )
        etc = NETNS_ETC / self.client
        etc.mkdir()
        self._undo.append((str(etc), ["rm", "-rf", "--", str(etc)]))
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{address} {name}" for name, address in hosts.items()]
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        for ns in (self.client, self.upstream):
            if "default" in run("ip", "-n", ns, "route", "show").stdout:
                raise RuntimeError(f"namespace {ns} has a default route")

    def close(self) -> list[str]:
        """Undo everything, newest first; returns the steps that failed (after trying all)."""
        failures = []
        while self._undo:
            what, cmd = self._undo.pop()
            try:
                result = run(*cmd, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{what}: {exc}")
                continue
            if result.returncode != 0:
                failures.append(f"{what}: {result.stderr.strip()}")
        return failures


@contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the block with this thread in namespace `ns` (only to create sockets)."""
    with _setns_lock:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            os.setns(target, os.CLONE_NEWNET)
            try:
                yield
            finally:
                os.setns(own, os.CLONE_NEWNET)
        finally:
            os.close(target)
            os.close(own)


def port_open(ns: str, host: str, port: int) -> bool:
    """Whether something accepts TCP connections on host:port inside namespace `ns`."""
    with inside(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(1.0)
        sock.connect((host, port))
    except OSError:
        return False
    finally:
        sock.close()
    return True
