"""`make try [CONFIG=FILE] [URL=https://host/path]`: your environment file against a local
test upstream, with no network and no code (issue 48, D408).

What it builds (testbed's namespaces, as the end-to-end tests do; root needed):

    this namespace (the sandbox's side)  ->  namespace <tag>p: egress-proxy on CONFIG
                                          ->  namespace <tag>u: a test HTTPS/HTTP upstream

In the proxy's namespace every name of the allowlist (an exact name as it is, a wildcard
as `try.<suffix>`, `*` as `www.example.com`) resolves to the test upstream, whose
certificate (a test CA the proxy is told to trust) names them all, and nothing else
resolves: no request can leave the machine. The proxy runs on a copy of CONFIG with one
entry added, the test upstream's /30 (198.18.1.0/30, reserved: no real host), because the
proxy refuses internal addresses no entry opens; the output says so.

It then shows an allowed request (URL, or the first allowlisted name) with what the
upstream received (an injected header by name and length, never its value), a refusal
(a name no entry allows, or the metadata address when `*` allows every name), and the
proxy's audit lines for both. Everything it built is removed when it ends, also when
SIGTERM or SIGHUP ends it (exit status 128 + the signal's number).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from sandbox_egress.proxy.config import loader as configuration
from sandbox_egress.proxy.config.patterns import PatternKind
from testbed import procs
from testbed.harness import JsonLines
from testbed.netns import UPSTREAM_IP, Topology, netns_available
from testbed.proxyproc import start_proxy
from testbed.rawhttp import Conn, Response
from testbed.testca import make_test_pki

BIN = Path(sys.executable).parent
TEST_NET = "198.18.1.0/30"  # testbed.netns: the proxy's uplink and the upstream
PORT, METRICS = 8080, 9464
REFUSED_NAME = "not-in-your-allowlist.example"


def sample_names(network: configuration.NetworkConfig) -> list[str]:
    """A name each entry allows, in allowlist order (the proxy resolves them to the upstream)."""
    names = []
    for entry in network.allowlist:
        kind, pattern = entry.kind, entry.pattern
        if kind is PatternKind.EXACT:
            names.append(pattern)
        elif kind is PatternKind.WILDCARD:
            names.append("try." + pattern.removeprefix("*."))
        elif kind is PatternKind.ANY:
            names.append("www.example.com")
    return list(dict.fromkeys(names))


def with_test_network(source: Path, target: Path) -> None:
    """A copy of the environment file with the test upstream's network opened."""
    document: Any = yaml.safe_load(source.read_text(encoding="utf-8"))
    holder = document if "network" in document else document["environment"]
    holder["network"].setdefault("allowlist", []).append({"domain": TEST_NET})
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def send(proxy_ip: str, ca: Path, url: str) -> Response:
    """GET `url` through the proxy as a sandbox would (CONNECT and TLS for https)."""
    parts = urlsplit(url)
    host, path = parts.hostname or "", parts.path or "/"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    with Conn(proxy_ip, PORT) as conn:
        if parts.scheme != "https":
            headers = [("Host", parts.netloc), ("Connection", "close")]
            return conn.request("GET", url, headers)
        answer = conn.connect(f"{host}:{port}")
        if answer.status != 200:
            return answer
        conn.start_tls(ssl.create_default_context(cafile=str(ca)), host)
        authority = host if port == 443 else f"{host}:{port}"
        return conn.request("GET", path, [("Host", authority), ("Connection", "close")])


def shown(response: Response) -> str:
    reason = response.header("X-Egress-Denied")
    if reason is None:
        return f"{response.status}"
    try:
        message = response.json().get("message", "")
    except ValueError:
        message = ""
    return f"{response.status} {reason}: {message}"


def received(upstream: JsonLines, mark: int, injected: list[str]) -> list[str]:
    """The injected headers as the upstream received them: by name and length, no value."""
    wanted = {name.lower() for name in injected}
    return [
        f"{name}: <{len(value)} characters from the proxy's environment or credentials>"
        for record in upstream.since(mark)
        if record.get("event") == "request"
        for name, value in record["headers"]
        if name.lower() in wanted
    ]


def refusal_url(network: configuration.NetworkConfig) -> str:
    if any(e.kind is PatternKind.ANY for e in network.allowlist):
        return "http://169.254.169.254/latest/meta-data/"  # the metadata address: never
    return f"https://{REFUSED_NAME}/"


def run(config: Path, url: str | None, say: Any) -> int:
    network = configuration.load(config)  # its problems stop here, located, as `check` says
    names = sample_names(network)
    if url is None and not names:
        say("make try: the allowlist names no host to try; give one: make try URL=https://...")
        return 2
    url = url or f"https://{names[0]}/"
    host = urlsplit(url).hostname or ""
    names = list(dict.fromkeys([host, *names]))
    with tempfile.TemporaryDirectory(prefix="egress-try-") as tmp:
        base = Path(tmp)
        pki = make_test_pki(base, names, [UPSTREAM_IP])
        tried = base / "try.yaml"
        with_test_network(config, tried)
        topology = Topology(tag=f"egy{os.getpid() % 100000}")
        try:
            topology.build({name: [UPSTREAM_IP] for name in names})
            return _show(topology, base, pki, tried, config, url, network, names, say)
        finally:
            topology.close()


def _show(topology: Topology, base: Path, pki: Any, tried: Path, config: Path, url: str,
          network: configuration.NetworkConfig, names: list[str], say: Any) -> int:  # fmt: skip
    upstream_log = base / "upstream.jsonl"
    upstream_log.touch()
    ready = base / "upstream.ready"
    echo_port = urlsplit(url).port
    extra = ["--echo-tls", f"{UPSTREAM_IP}:{echo_port}"] if echo_port not in (None, 443) else []
    upstream = procs.start(
        "try-upstream",
        [*topology.exec_prefix(topology.ns_upstream), sys.executable, "-m", "testbed.echo_server",
         "--log", str(upstream_log), "--ready", str(ready), "--cert", str(pki.server_cert),
         "--key", str(pki.server_key), "--echo-tls", f"{UPSTREAM_IP}:443",
         "--echo", f"{UPSTREAM_IP}:80", *extra],
        base,
    )  # fmt: skip
    try:
        procs.wait_until("test upstream ready", ready.exists, timeout=20, child=upstream)
        proxy = start_proxy(
            "try-proxy",
            topology.exec_prefix(topology.ns_proxy),
            BIN / "egress-proxy",
            tried,
            ["--listen", f"{topology.proxy_ip}:{PORT}",
             "--metrics", f"{topology.proxy_ip}:{METRICS}",
             "--certs", str(base / "certs"), "--upstream-ca", str(pki.ca_cert)],
            base,
            dict(os.environ),
            lambda: socket.create_connection((topology.proxy_ip, METRICS), timeout=5),
        )  # fmt: skip
        try:
            ca = base / "certs" / "mitmproxy-ca-cert.pem"
            say(f"make try: {config} against a test upstream in a network namespace of its own")
            say(f"  the proxy resolves {', '.join(names)} to the test upstream ({UPSTREAM_IP});")
            say(f"  its copy of the file also opens {TEST_NET}, the test upstream's network")
            say("  (reserved addresses are refused unless an entry opens them). Nothing leaves")
            say("  this machine.")
            uplog = JsonLines(upstream_log)
            mark = uplog.mark()
            allowed = send(topology.proxy_ip, ca, url)
            say(f"\nallowed?  GET {url} -> {shown(allowed)}")
            audit = proxy_audit(proxy.audit, 2 if urlsplit(url).scheme == "https" else 1)
            injected = [n for line in audit for n in line.get("injected") or ()]
            for line in received(uplog, mark, injected):
                say(f"          the upstream received {line}")
            refused_url = refusal_url(network)
            say(f"refused?  GET {refused_url} -> {shown(send(topology.proxy_ip, ca, refused_url))}")
            say("\naudit (the proxy's --audit-log, one JSON line per decision):")
            for record in proxy_audit(proxy.audit, len(audit) + 1):
                say("  " + json.dumps(record, separators=(", ", ": ")))
        finally:
            proxy.child.stop()
    finally:
        upstream.stop()
    return 0


def proxy_audit(path: Path, count: int) -> list[dict[str, Any]]:
    audit = JsonLines(path)
    found = audit.wait_count(0, count, timeout=5)
    keys = ("method", "host", "port", "decision", "reason", "rule", "status", "injected")
    return [{k: line.get(k) for k in keys} for line in found]


def stop_on(signum: int, _frame: object) -> None:
    """SIGTERM or SIGHUP (`kill`, a closed terminal): unwind, so every `finally` removes
    what it built (the children run in sessions of their own; D516)."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop_on)
    reason = netns_available()
    if reason is not None:
        print(f"make try builds network namespaces and {reason}.", file=sys.stderr)
        print("Run it as root (for example: sudo make try CONFIG=...).", file=sys.stderr)
        return 2
    config = Path(argv[0] if argv else "config/default.yaml")
    url = argv[1] if len(argv) > 1 and argv[1] else None
    try:
        return run(config, url, lambda line: print(line, flush=True))
    except configuration.ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
