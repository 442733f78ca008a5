"""Fixtures of the real-client suite: nginx, a WebSocket upstream, and the clients' set-up.

The session proxy, namespaces and test PKI are those of tests/e2e/conftest.py. Here:
* nginx in the upstream namespace (HTTPS with HTTP/2 on 198.18.1.2:9444, HTTP on
  :9081) serving `testbed.registries` content: a 32 MiB file, a pip index, a git
  repository, an npm registry;
* a WebSocket echo upstream on 198.18.1.2:9445;
* the Node.js proxy agents (`https-proxy-agent`, `undici`), installed once from the npm
  registry into `.cache/clients-node/` (git-ignored) when missing.

Every client runs as the sandbox would (in the root namespace, which reaches nothing but
the proxy), with an environment built from nothing: PATH, a HOME of its own, and only
the variables of the README's recipe for that client, so this machine's own CA settings
(SSL_CERT_FILE, PIP_CERT, ... point at the system store here) never help a client.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed import nginx, nsock, registries
from testbed.harness import Harness, JsonLines
from testbed.netns import UPSTREAM_IP, Topology
from testbed.testca import Pki
from tests.e2e.conftest import REPO, _start_and_wait

HTTPS_PORT, HTTP_PORT, WS_PORT = 9444, 9081, 9445
BASE_URL = f"https://api.allowed.test:{HTTPS_PORT}"
WS_ECHO = ["-m", "testbed.ws_echo"]
NODE_CACHE = REPO / ".cache" / "clients-node"
NODE_PACKAGES = ["https-proxy-agent@7", "undici@7"]
CLIENT_TIMEOUT = 120


@dataclass(frozen=True)
class Clients:
    """What a client test needs: the proxy, the upstreams' logs, a clean environment."""

    harness: Harness
    nginx: nginx.Nginx
    ws_log: JsonLines
    content: registries.Content
    home: Path
    node_modules: Path

    @property
    def proxy_url(self) -> str:
        return f"http://{self.harness.proxy_host}:{self.harness.proxy_port}"

    @property
    def ca(self) -> str:
        return str(self.harness.proxy_ca)

    @property
    def secret(self) -> str:
        return self.harness.secrets[0]

    def env(self, **recipe: str) -> dict[str, str]:
        """PATH, HOME, locale, and the recipe's variables; nothing else of this machine."""
        return {"PATH": os.environ["PATH"], "HOME": str(self.home), "LANG": "C.UTF-8", **recipe}

    def proxy_env(self, **recipe: str) -> dict[str, str]:
        """The standard proxy variables (both spellings) and the recipe's variables."""
        proxy = self.proxy_url
        return self.env(HTTPS_PROXY=proxy, https_proxy=proxy, HTTP_PROXY=proxy,
                        http_proxy=proxy, **recipe)  # fmt: skip

    def run(self, argv: list[str], env: dict[str, str], cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return subprocess.run(argv, env=env, cwd=cwd or self.home, capture_output=True,
                              text=True, timeout=CLIENT_TIMEOUT)  # fmt: skip


@pytest.fixture(scope="session")
def content(e2e_dir: Path) -> registries.Content:
    return registries.build(e2e_dir / "clients-content", BASE_URL)


@pytest.fixture(scope="session")
def nginx_upstream(
    topology: Topology, pki: Pki, e2e_dir: Path, content: registries.Content
) -> Iterator[nginx.Nginx]:
    def accepting() -> bool:
        try:
            nsock.connect(topology.ns_upstream, (UPSTREAM_IP, HTTPS_PORT), timeout=1).close()
        except OSError:
            return False
        return True

    server = nginx.start(
        topology.exec_prefix(topology.ns_upstream),
        e2e_dir / "nginx",
        content.root,
        UPSTREAM_IP,
        (HTTPS_PORT, HTTP_PORT),
        pki.server_cert,
        pki.server_key,
        e2e_dir,
        accepting,
    )
    try:
        yield server
    finally:
        server.child.stop()


@pytest.fixture(scope="session")
def ws_upstream(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[JsonLines]:
    log, ready = e2e_dir / "ws.jsonl", e2e_dir / "ws.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, *WS_ECHO, "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{WS_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("ws-echo", argv, e2e_dir, ready)
    try:
        yield JsonLines(log)
    finally:
        child.stop()


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """The Node.js proxy agents, installed from the npm registry once (the suite installs
    what is missing, like make test's system packages)."""
    modules = NODE_CACHE / "node_modules"
    if all((modules / p.rsplit("@", 1)[0]).is_dir() for p in NODE_PACKAGES):
        return modules
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("the client suite needs node and npm (scripts/install-test-deps installs them)")
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NODE_CACHE), *NODE_PACKAGES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"npm install of the proxy agents failed:\n{result.stderr}"
    return modules


@pytest.fixture(scope="session")
def clients(
    harness: Harness,
    nginx_upstream: nginx.Nginx,
    ws_upstream: JsonLines,
    content: registries.Content,
    node_modules: Path,
    e2e_dir: Path,
) -> Clients:
    home = e2e_dir / "client-home"
    home.mkdir()
    return Clients(harness, nginx_upstream, ws_upstream, content, home, node_modules)
