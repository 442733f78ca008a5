"""The same real clients in transparent mode: no proxy settings at all (issue 13).

The sandbox resolves the names itself (its hosts file says 198.18.11.2) and connects
directly; the gateway's firewall (docs/operations.md, word for word) redirects every TCP
connection to `egress-proxy run --mode transparent`, which decides on the SNI/Host and
connects to what the name resolves to on its side. Every client only trusts the proxy CA,
by its ecosystem's recipe (README). A refused host is a readable 403 here (the TLS is
intercepted before the decision), shown the client's own way.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import nginx, nsock, procs, registries
from testbed.harness import JsonLines
from testbed.netns import netns_available
from testbed.proxyproc import start_proxy
from testbed.testca import make_test_pki
from testbed.transparent import METRICS_PORT, PROXY_PORT, REAL_IP, TransparentTopology
from tests.e2e.clients.conftest import CLIENT_TIMEOUT, WS_ECHO
from tests.e2e.clients.expect import (
    assert_every_request_injected,
    assert_injected_once,
    assert_no_secret,
)
from tests.e2e.conftest import EGRESS_PROXY, create_ca

pytestmark = pytest.mark.netns

PY_CLIENT = Path(__file__).with_name("py_client.py")
NODE_CLIENT = Path(__file__).with_name("node_client.cjs")
WS_PORT = 8443
BASE = "https://api.t.test"
SECRET_ENV = "E2E_TPC_SECRET"
PLACEHOLDER = "sk-egress-placeholder-tpc"
NAMES = ["api.t.test", "other.t.test", "notlisted.t.test"]
CONFIG = f"""\
network:
  allowlist:
    - domain: api.t.test
      transform:
        Authorization: "Bearer ${{{SECRET_ENV}}}"
        X-Api-Key: "${{{SECRET_ENV}}}"
    - domain: other.t.test
      secrets: [{{placeholder: {PLACEHOLDER}, value: "${{{SECRET_ENV}}}", require: true}}]
    - domain: {REAL_IP}/32             # the names' home, in a reserved range
      ports: [443, {WS_PORT}]
"""


@dataclass(frozen=True)
class Sandbox:
    topo: TransparentTopology
    nginx: nginx.Nginx
    ws_log: JsonLines
    content: registries.Content
    ca: str
    secret: str
    home: Path

    def run(self, argv: list[str], **recipe: str) -> subprocess.CompletedProcess[str]:
        """Run a client inside the sandbox namespace, with only the recipe's variables."""
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "LANG": "C.UTF-8", **recipe}
        return subprocess.run(self.topo.exec_prefix(self.topo.ns_sandbox) + argv, env=env,
                              cwd=self.home, capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT)  # fmt: skip

    def python(self, client: str, url: str, out: Path | None = None, **recipe: str) -> Any:
        argv = [sys.executable, str(PY_CLIENT), client, url] + ([str(out)] if out else [])
        result = self.run(argv, **recipe)
        assert_no_secret(self, result.stdout, result.stderr)
        assert result.stdout, result.stderr
        return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    reason = netns_available()
    if reason is None and shutil.which("iptables") is None:
        reason = "needs iptables (scripts/install-test-deps installs it)"
    if reason is not None:
        pytest.fail(f"end-to-end tests cannot run: {reason}")
    base = tmp_path_factory.mktemp("clients-transparent")
    (base / "pki").mkdir()
    pki = make_test_pki(base / "pki", NAMES, [REAL_IP])
    content = registries.build(base / "content", BASE)
    secret = f"s3cr3t-tpc-{secrets.token_hex(8)}"
    (base / "config.yaml").write_text(CONFIG)
    home = base / "home"
    home.mkdir()
    topo = TransparentTopology(tag=f"egc{os.getpid()}")
    children: list[procs.Child] = []
    try:
        topo.build({name: [REAL_IP] for name in NAMES})
        with open(f"/etc/netns/{topo.ns_sandbox}/hosts", "a", encoding="utf-8") as hosts:
            hosts.writelines(f"{REAL_IP} {name}\n" for name in NAMES)
        up = topo.exec_prefix(topo.ns_upstream)

        def accepting() -> bool:
            try:
                nsock.connect(topo.ns_upstream, (REAL_IP, 443), timeout=1).close()
            except OSError:
                return False
            return True

        server = nginx.start(up, base / "nginx", content.root, REAL_IP, (443, 80),
                             pki.server_cert, pki.server_key, base, accepting)  # fmt: skip
        children.append(server.child)
        ws_log, ws_ready = base / "ws.jsonl", base / "ws.ready"
        ws_log.touch()
        ws = procs.start("tpc-ws", up + [
            sys.executable, *WS_ECHO, "--log", str(ws_log), "--ready", str(ws_ready),
            "--cert", str(pki.server_cert), "--key", str(pki.server_key),
            "--listen", f"{REAL_IP}:{WS_PORT}"], base)  # fmt: skip
        children.append(ws)
        procs.wait_until("ws upstream", ws_ready.exists, timeout=15, child=ws)
        certs = base / "certs"
        proxy_ca = create_ca(certs)
        env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
        env[SECRET_ENV] = secret
        proxy = start_proxy(
            "tpc-proxy",
            topo.exec_prefix(topo.ns_gateway),
            EGRESS_PROXY,
            base / "config.yaml",
            ["--mode", "transparent", "--listen", f"0.0.0.0:{PROXY_PORT}"]
            + ["--metrics", f"0.0.0.0:{METRICS_PORT}", "--certs", str(certs)]
            + ["--upstream-ca", str(pki.ca_cert)],
            base,
            env,
            lambda: nsock.connect(topo.ns_gateway, ("127.0.0.1", METRICS_PORT), timeout=5),
        )
        children.append(proxy.child)
        yield Sandbox(topo, server, JsonLines(ws_log), content, str(proxy_ca), secret, home)
    finally:
        for child in reversed(children):
            child.stop()
        failures = topo.close()
        if failures:
            raise RuntimeError("topology cleanup failed:\n" + "\n".join(failures))


OWN = "Authorization: Bearer sandbox-own-token"


def test_curl_http11_and_http2(sandbox: Sandbox) -> None:
    for flag, version, proto in (("--http1.1", "1.1", "HTTP/1.1"), ("--http2", "2", "HTTP/2.0")):
        mark = sandbox.nginx.mark()
        result = sandbox.run(
            ["curl", "-sS", flag, "-H", OWN, "-w", "%{http_version}", "-o", "/dev/null",
             f"{BASE}/headers"],
            CURL_CA_BUNDLE=sandbox.ca,
        )  # fmt: skip
        assert (result.returncode, result.stdout) == (0, version), result.stderr
        assert assert_injected_once(sandbox, mark, "/headers")["proto"] == proto
        assert_no_secret(sandbox, result.stdout, result.stderr)


def test_curl_refused_host_is_a_readable_403(sandbox: Sandbox) -> None:
    mark = sandbox.nginx.mark()
    result = sandbox.run(
        ["curl", "-sS", "-f", "-D", "-", "-o", "/dev/null", "https://notlisted.t.test/headers"],
        CURL_CA_BUNDLE=sandbox.ca,
    )
    assert result.returncode == 22  # curl -f: an HTTP error status
    assert "The requested URL returned error: 403" in result.stderr
    assert "x-egress-denied: not_allowlisted" in result.stdout.lower()
    assert sandbox.nginx.since(mark) == []


def test_wget_download_arrives_intact(sandbox: Sandbox) -> None:
    big = sandbox.home / "wget-big.bin"
    result = sandbox.run(
        ["wget", "-q", "--ca-certificate", sandbox.ca, "-O", str(big), f"{BASE}/big.bin"]
    )
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(big.read_bytes()).hexdigest() == sandbox.content.big_sha256
    big.unlink()


@pytest.mark.parametrize(
    ("client", "recipe"),
    [("requests", "REQUESTS_CA_BUNDLE"), ("httpx", "SSL_CERT_FILE"), ("aiohttp", "SSL_CERT_FILE")],
)
def test_python_clients(sandbox: Sandbox, client: str, recipe: str) -> None:
    mark = sandbox.nginx.mark()
    answer = sandbox.python(client, f"{BASE}/headers", **{recipe: sandbox.ca})
    assert answer["status"] == 200, answer
    entry = assert_injected_once(sandbox, mark, "/headers")
    if client == "httpx":
        assert answer["version"] == "HTTP/2"
        assert entry["proto"] == "HTTP/2.0"
    refused = sandbox.python(client, "https://notlisted.t.test/headers", **{recipe: sandbox.ca})
    assert refused["status"] == 403, refused
    assert sandbox.nginx.since(mark + 1) == []
    out = sandbox.home / f"tp-{client}-big.bin"
    answer = sandbox.python(client, f"{BASE}/big.bin", out, **{recipe: sandbox.ca})
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sandbox.content.big_sha256
    out.unlink()


def test_websocket_upgrade_carries_the_injected_header(sandbox: Sandbox) -> None:
    mark = sandbox.ws_log.mark()
    answer = sandbox.python("websocket", f"wss://api.t.test:{WS_PORT}/socket",
                            SSL_CERT_FILE=sandbox.ca)  # fmt: skip
    assert answer == {"status": 101, "echo": "ping through the proxy"}
    upgrades = sandbox.ws_log.since(mark)
    authorization = [v for n, v in upgrades[0]["headers"] if n.lower() == "authorization"]
    assert authorization == [f"Bearer {sandbox.secret}"]


def test_pip_git_npm(sandbox: Sandbox) -> None:
    mark, target = sandbox.nginx.mark(), sandbox.home / "pip-target"
    result = sandbox.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--target",
         str(target), "--index-url", f"{BASE}/simple/", registries.PY_PACKAGE],
        PIP_CERT=sandbox.ca, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (target / "egress_demo.py").read_text() == registries.MODULE_TEXT
    assert_every_request_injected(
        sandbox, mark, [f"/simple/{registries.PY_PACKAGE}/", f"/packages/{sandbox.content.wheel}"]
    )

    mark, dest = sandbox.nginx.mark(), sandbox.home / "git-clone"
    result = sandbox.run(["git", "clone", "-q", f"{BASE}/git/demo.git", str(dest)],
                         GIT_SSL_CAINFO=sandbox.ca, GIT_CONFIG_NOSYSTEM="1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (dest / registries.GIT_FILE).read_text() == registries.GIT_TEXT
    assert all(e["auth"] == f"Bearer {sandbox.secret}" for e in sandbox.nginx.since(mark))

    mark, prefix = sandbox.nginx.mark(), sandbox.home / "npm-prefix"
    prefix.mkdir()
    result = sandbox.run(
        ["npm", "install", "--no-audit", "--no-fund", "--no-update-notifier", "--prefix",
         str(prefix), "--registry", f"{BASE}/npm/", registries.NPM_PACKAGE],
        npm_config_cafile=sandbox.ca, npm_config_cache=str(prefix / ".npm-cache"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (prefix / "node_modules" / registries.NPM_PACKAGE / "index.js").is_file()
    tarball = f"{registries.NPM_PACKAGE}-{registries.NPM_VERSION}.tgz"
    assert_every_request_injected(
        sandbox, mark,
        [f"/npm/{registries.PY_PACKAGE}", f"/npm/{registries.NPM_PACKAGE}/-/{tarball}"],
    )  # fmt: skip


def test_node_https_needs_no_agent(sandbox: Sandbox) -> None:
    node = shutil.which("node")
    assert node is not None
    mark = sandbox.nginx.mark()
    result = sandbox.run([node, str(NODE_CLIENT), "none", f"{BASE}/headers"],
                         NODE_EXTRA_CA_CERTS=sandbox.ca)  # fmt: skip
    assert json.loads(result.stdout) == {"status": 200, "bytes": 3}, result.stderr
    assert_injected_once(sandbox, mark, "/headers")


def test_placeholders_are_swapped_and_refused_elsewhere(sandbox: Sandbox) -> None:
    """Transparent mode, HTTP/1.1 and HTTP/2: the placeholder becomes the value on its own
    host, and is refused `placeholder_elsewhere` on another (docs/configuration.md#placeholders)."""
    held = f"Authorization: Bearer {PLACEHOLDER}"
    for flag, proto in (("--http1.1", "HTTP/1.1"), ("--http2", "HTTP/2.0")):
        mark = sandbox.nginx.mark()
        result = sandbox.run(
            ["curl", "-sS", flag, "-H", held, "-o", "/dev/null", "-w", "%{http_code}",
             "https://other.t.test/headers"],
            CURL_CA_BUNDLE=sandbox.ca,
        )  # fmt: skip
        assert (result.returncode, result.stdout) == (0, "200"), result.stderr
        [entry] = sandbox.nginx.since(mark)
        assert (entry["proto"], entry["auth"]) == (proto, f"Bearer {sandbox.secret}")
        mark = sandbox.nginx.mark()
        result = sandbox.run(
            ["curl", "-sS", flag, "-H", held, "-D", "-", "-o", "/dev/null", f"{BASE}/headers"],
            CURL_CA_BUNDLE=sandbox.ca,
        )  # fmt: skip
        assert "x-egress-denied: placeholder_elsewhere" in result.stdout.lower(), result.stdout
        assert sandbox.nginx.since(mark) == []
