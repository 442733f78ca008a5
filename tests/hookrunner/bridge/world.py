"""A network namespace with a real egress proxy (approvals on, an admin token) and an
echo server behind a veth, for the approvals bridge's tests (issue 47).

``World(root, config)``: the namespace ``<tag>m`` (the proxy on 127.0.0.1, what a test
runs there), ``<tag>u`` (the echo at 198.18.47.2, which ``new.example``,
``other.example`` and ``third.example`` name in ``<tag>m``'s ``/etc/netns`` hosts).
``close()`` stops what it started and removes the namespaces, also after a partial set-up.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import urllib.request
from pathlib import Path
from typing import Any

from testbed import procs
from testbed.claude_code import REPO
from testbed.netns import Namespaces
from testbed.nsock import in_namespace
from testbed.proxyproc import ProxyProcess, start_proxy

NAMES = ("new.example", "other.example", "third.example")
UPLINK, UPSTREAM = "198.18.47.1", "198.18.47.2"
PROXY_PORT, METRICS_PORT = 18047, 19047
EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"
CONFIG = f"""
network:
  allowlist:
    - domain: "{UPSTREAM}/32"
approvals:
  unknown: hold
  timeout: 4s
  max_pending: 5
  scopes: [once]
"""


class World:
    """The namespaces, the echo server and the proxy."""

    def __init__(self, root: Path, config: str = CONFIG) -> None:
        self.root, self.config = root, config
        self.namespaces = Namespaces(f"cb{os.getpid() % 100000}")
        self.ns = f"{self.namespaces.tag}m"
        self.children: list[procs.Child] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        root = self.root
        self.namespaces.add_namespaces(self.ns)
        self.namespaces.write_etc(self.ns, [(UPSTREAM, name) for name in NAMES], "127.0.0.1")
        upstream = f"{self.namespaces.tag}u"  # the echo's own namespace: not the proxy's host
        self.namespaces.add_namespaces(upstream)
        self.namespaces.add_veth(
            self.ns, f"{self.namespaces.tag}x", upstream, f"{self.namespaces.tag}y"
        )
        self.namespaces.link_up(self.ns, f"{self.namespaces.tag}x", f"{UPLINK}/30")
        self.namespaces.link_up(upstream, f"{self.namespaces.tag}y", f"{UPSTREAM}/30")
        self.echo_log = root / "echo.jsonl"
        ready = root / "echo.ready"
        echo = procs.start(
            "echo",
            ["ip", "netns", "exec", upstream, sys.executable, "-m", "testbed.echo_server",
             "--log", str(self.echo_log), "--ready", str(ready), "--echo", f"{UPSTREAM}:80"],
            root, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        self.children.append(echo)
        procs.wait_until("the echo server", ready.exists, 30, echo)
        self.secrets = root / "secrets"
        self.secrets.mkdir()
        self.token = self.secrets / "admin-token"
        self.token.write_text(secrets.token_hex(24) + "\n")
        self.token.chmod(0o600)
        config = root / "egress.yaml"
        config.write_text(self.config.format(root=root))
        self.proxy: ProxyProcess = start_proxy(
            "proxy", ["ip", "netns", "exec", self.ns], EGRESS_PROXY, config,
            ["--listen", f"127.0.0.1:{PROXY_PORT}", "--metrics", f"127.0.0.1:{METRICS_PORT}",
             "--admin-token-file", str(self.token), "--certs", str(root / "certs")],
            root, {"PATH": "/usr/bin:/bin"}, self.metrics_socket,
        )  # fmt: skip
        self.children.append(self.proxy.child)

    def metrics_socket(self) -> socket.socket:
        with in_namespace(self.ns):
            sock = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=10)
        return sock

    def approvals(self) -> dict[str, Any]:
        """``GET /approvals`` with the token, from inside the namespace."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{METRICS_PORT}/approvals",
            headers={"Authorization": f"Bearer {self.token.read_text().strip()}"},
        )
        with in_namespace(self.ns):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            conn = opener.open(request, timeout=10)
        with conn:
            found: dict[str, Any] = json.loads(conn.read())
        return found

    def echoed(self) -> list[dict[str, Any]]:
        lines = self.echo_log.read_text().splitlines() if self.echo_log.exists() else []
        return [e for e in map(json.loads, lines) if e["event"] == "request"]

    def close(self) -> None:
        for child in reversed(self.children):
            child.stop()
        assert self.namespaces.close() == []
