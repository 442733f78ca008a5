"""The whole system on one machine: a sandbox behind the transparent proxy, a telemetry upstream.

Used by the scenario tests (tests/e2e/test_scenarios_e2e.py) and by `make demo`.

    sandbox ns  -- hookrunner runs here; its TCP is redirected by the gateway's iptables
    gateway ns  -- egress-proxy --mode transparent, a DNS server for the sandbox, a trap
                   on loopback (the proxy must never connect to it)
    upstream ns -- telemetry.example.test: an HTTPS echo that logs what it received

The only secret (the telemetry token) lives in the proxy's environment. The
sandbox's view of the world: the proxy CA certificate, hooks.json, a DNS answer
for every name — and nothing else.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed import nsock, procs
from testbed.harness import AuditLines, JsonLines
from testbed.proxyproc import ProxyProcess, start_proxy
from testbed.testca import make_test_pki
from testbed.transparent import METRICS_PORT, PROXY_PORT, REAL_IP, TransparentTopology

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ECHO_SERVER = ["-m", "testbed.echo_server"]

TELEMETRY = "telemetry.example.test"
LOOPBACK_HOOK = "loopback-hook.example.test"  # the proxy resolves it to 127.0.0.1
NOT_ALLOWED = "not-allowed.example.org"
MCP_HOST = "mcp.example.test"  # the MCP entry (issue 48): one tool, a budget of 3 calls
MCP_BUDGET = 3
TOKEN_ENV = "TELEMETRY_TOKEN"

# What the proxy's gateway resolves (its hosts file): the truth.
GATEWAY_HOSTS = {
    TELEMETRY: [REAL_IP],
    LOOPBACK_HOOK: ["127.0.0.1"],
    NOT_ALLOWED: [REAL_IP],
    MCP_HOST: [REAL_IP],
}
# What the sandbox's resolver answers: every name leads out through the gateway.
SANDBOX_ZONE = {name: [[REAL_IP]] for name in GATEWAY_HOSTS}

CONFIG = f"""\
network:
  allowlist:
    - domain: {TELEMETRY}
      transform:
        Authorization: "Bearer ${{{TOKEN_ENV}}}"
    - domain: {MCP_HOST}
      transform:
        Authorization: "Bearer ${{{TOKEN_ENV}}}"
      mcp:
        endpoint: ["/mcp"]
        tools: [search_repositories]
      budget:
        requests: "{MCP_BUDGET}/hour"
    - domain: "*.example.test"
    - domain: 198.18.11.0/30   # the upstream network (198.18/15 is reserved)
"""


@dataclass
class Stage:
    topology: TransparentTopology
    proxy: ProxyProcess
    proxy_ca: Path
    token: str
    upstream_log: JsonLines
    trap_log: JsonLines
    audit_log: JsonLines
    base: Path

    def in_sandbox(self, script: str) -> str:
        """Run a Python `script` inside the sandbox namespace (trusting the proxy CA only);
        its stdout."""
        env = {"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(self.proxy_ca)}
        done = subprocess.run(
            [*self.topology.exec_prefix(self.topology.ns_sandbox), sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sandbox script failed: {done.stderr}")
        return done.stdout

    def hookrunner(
        self, args: list[str], payload: dict[str, object], workspace: Path
    ) -> tuple[dict[str, object], str]:
        """Run `hookrunner ARGS` inside the sandbox namespace, as the agent runtime would."""
        env = {"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(self.proxy_ca), "HOME": str(workspace)}
        done = subprocess.run(
            [*self.topology.exec_prefix(self.topology.ns_sandbox), str(BIN / "hookrunner"), *args],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        return json.loads(done.stdout), done.stderr


def _ready_file(child: procs.Child, path: Path, what: str) -> None:
    procs.wait_until(what, path.exists, timeout=15, child=child)


@contextmanager
def system_stage(base: Path) -> Iterator[Stage]:
    base.mkdir(parents=True, exist_ok=True)
    token = f"tok-{secrets.token_hex(12)}"
    pki_dir = base / "pki"
    pki_dir.mkdir(exist_ok=True)
    pki = make_test_pki(pki_dir, [TELEMETRY, NOT_ALLOWED, LOOPBACK_HOOK, MCP_HOST], [REAL_IP])
    logs = {name: base / f"{name}.jsonl" for name in ("upstream", "trap", "dns")}
    for path in logs.values():
        path.touch()
    zone = base / "zone.json"
    zone.write_text(json.dumps(SANDBOX_ZONE))
    config = base / "environment.yaml"
    config.write_text(CONFIG)

    topology = TransparentTopology(tag=f"egs{os.getpid()}")
    children: list[procs.Child] = []
    try:
        topology.build(GATEWAY_HOSTS)
        up = topology.exec_prefix(topology.ns_upstream)
        gw = topology.exec_prefix(topology.ns_gateway)
        py = sys.executable
        echo_ready, trap_ready = base / "echo.ready", base / "trap.ready"
        echo = procs.start(
            "stage-telemetry",
            [*up, py, *ECHO_SERVER, "--log", str(logs["upstream"]), "--ready", str(echo_ready),
             "--cert", str(pki.server_cert), "--key", str(pki.server_key), "--echo-tls", f"{REAL_IP}:443"],
            base,
        )  # fmt: skip
        children.append(echo)
        _ready_file(echo, echo_ready, "telemetry upstream ready")
        trap = procs.start(
            "stage-trap",
            [*gw, py, *ECHO_SERVER, "--log", str(logs["trap"]), "--ready", str(trap_ready),
             "--trap", "[::]:443"],
            base,
        )  # fmt: skip
        children.append(trap)
        _ready_file(trap, trap_ready, "loopback trap ready")
        dns = procs.start(
            "stage-dns",
            [*gw, py, "-m", "testbed.dns_server", "--listen", "0.0.0.0:53",
             "--zone", str(zone), "--log", str(logs["dns"])],
            base,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        children.append(dns)
        procs.wait_until(
            "sandbox resolver ready",
            lambda: "ready" in dns.stdout.read_text(),
            timeout=15,
            child=dns,
        )

        certs = base / "certs"
        ca = subprocess.run(
            [str(BIN / "egress-proxy"), "ca", "--certs", str(certs)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ca.returncode == 0, ca.stderr
        proxy_ca = Path(ca.stdout.strip().splitlines()[-1])
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        env[TOKEN_ENV] = token
        proxy = start_proxy(
            "stage-proxy",
            gw,
            BIN / "egress-proxy",
            config,
            ["--mode", "transparent", "--listen", f"0.0.0.0:{PROXY_PORT}",
             "--metrics", f"127.0.0.1:{METRICS_PORT}", "--certs", str(certs), "--upstream-ca", str(pki.ca_cert)],
            base,
            env,
            lambda: nsock.connect(topology.ns_gateway, ("127.0.0.1", METRICS_PORT), timeout=5),
        )  # fmt: skip
        children.append(proxy.child)
        yield Stage(
            topology=topology,
            proxy=proxy,
            proxy_ca=proxy_ca,
            token=token,
            upstream_log=JsonLines(logs["upstream"]),
            trap_log=JsonLines(logs["trap"]),
            audit_log=AuditLines(proxy.audit),
            base=base,
        )
    finally:
        for child in reversed(children):
            child.stop()
        failures = topology.close()
        if failures:
            raise RuntimeError("stage cleanup failed:\n" + "\n".join(failures))
