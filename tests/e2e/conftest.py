"""Session fixtures for the end-to-end tests: namespaces, upstreams, one running proxy.

Set-up order (each step undone in reverse at teardown, even after a failure):
test PKI -> namespaces and veths -> echo servers in U and traps in P -> proxy CA
(`egress-proxy ca`) -> `egress-proxy run` inside P, ready when /healthz answers 200.
A SIGTERM to pytest is turned into KeyboardInterrupt so that teardown still runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import nsock, procs
from testbed.expect import Observed
from testbed.harness import AuditLines, Harness, JsonLines
from testbed.moto import Moto, start_moto
from testbed.netns import INTERNAL_IP, UPSTREAM_IP, Topology, netns_available
from testbed.ocsfschema import audit_file_problems
from testbed.proxyproc import ProxyProcess, start_proxy
from testbed.rawhttp import Conn
from testbed.redisserver import RedisServer, start_redis
from testbed.testca import Pki, make_test_pki
from tests.e2e import session_scan

REPO = Path(__file__).resolve().parents[2]
EGRESS_PROXY = Path(sys.executable).parent / "egress-proxy"  # the venv running pytest
# E2E_FAST_PATH=1: the session's shared proxy (`harness`) and every private proxy run with
# `--fast-path` (issue 49, D612), so that any suite runs through the fast path whole.
FAST_PATH = os.environ.get("E2E_FAST_PATH") == "1"
ECHO_SERVER = ["-m", "testbed.echo_server"]
PROXY_PORT = 8080
METRICS_PORT = 9464
SECRET_ENV = "E2E_SECRET"

# Names the proxy namespace resolves (from /etc/netns/<ns>/hosts); "PROXY" is the
# proxy's own address, filled in once the topology has picked it.
PROXY_HOSTS: dict[str, list[str]] = {
    "api.allowed.test": [UPSTREAM_IP],
    "other.allowed.test": [UPSTREAM_IP],
    "plain.allowed.test": [UPSTREAM_IP],
    "ports.allowed.test": [UPSTREAM_IP],
    "x.wild.test": [UPSTREAM_IP],
    "wild.test": [UPSTREAM_IP],
    "notlisted.test": [UPSTREAM_IP],
    "internal.test": [INTERNAL_IP],
    "rebind.test": ["127.0.0.1"],
    "loop6.wild.test": ["::1"],
    "mixed.allowed.test": ["127.0.0.1", UPSTREAM_IP],
    "self.allowed.test": ["PROXY"],
}
# Names that only the tests' DNS server answers (test_hardening_e2e.py, rebinding): the
# upstream certificate carries them too, so a pinned connection to the upstream succeeds.
DNS_ONLY_NAMES = ["rebind-tunnel.allowed.test", "rebind-plain.allowed.test", "multi.allowed.test"]
CERT_NAMES = [n for n in PROXY_HOSTS if n != "self.allowed.test"] + DNS_ONLY_NAMES
BULK_SERVER = ["-m", "testbed.bulk_server"]
HOSTILE_PORT = 8090
HOSTILE_SERVER = ["-m", "testbed.hostile_server"]
BULK_PORT, BULK_TLS_PORT = 8000, 8001

CONFIG = """\
# End-to-end configuration. Entry order matters only for the error tests' indexes.
network:
  allowlist:
    - domain: api.allowed.test            # transform, TLS only
      transform:
        Authorization: "Bearer ${{{secret_env}}}"
        X-Api-Key: "${{{secret_env}}}"
    - domain: plain.allowed.test          # transform allowed over plain HTTP
      allow_plaintext: true
      transform:
        X-Plain-Token: "${{file:{file_secret}}}"
    - domain: ports.allowed.test          # most specific entry: only port 8443
      ports: [8443]
    - domain: "*.allowed.test"
    - domain: "*.wild.test"
    - domain: internal.test               # resolves to {internal_ip}, which nothing opens
    - domain: rebind.test                 # resolves to 127.0.0.1
    - domain: 198.18.1.0/24               # opens the upstreams' range (198.18/15 is reserved)
    - domain: {client_net}                # opens the proxy's own /30: only the self rule refuses
    - domain: budget.allowed.test         # a budget: its series exist from the start
      budget: {{requests: "1000/second", upload: "1GiB/day"}}
"""


@dataclass(frozen=True)
class Upstreams:
    log: Path
    trap_log: Path


# Run inside the proxy namespace before the proxy exists: proves the names, routes,
# certificates and traps of the harness itself (a harness bug must not look like a proxy bug).
PROBE = r"""
import json, socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
out = {}
for name, port, tls in [("api.allowed.test", 443, True), ("other.allowed.test", 80, False),
                        ("x.wild.test", 8443, True), ("198.18.1.2", 443, True)]:
    s = socket.create_connection((name, port), timeout=5)
    if tls:
        s = ctx.wrap_socket(s, server_hostname=name)
    s.sendall(f"GET /harness-probe HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    out[f"{name}:{port}"] = data.split(b"\r\n", 1)[0].decode()
for name, port in [("rebind.test", 80), ("loop6.wild.test", 443), ("internal.test", 443)]:
    socket.create_connection((name, port), timeout=5).close()
    out[f"{name}:{port}"] = "connected"
try:
    socket.getaddrinfo("missing.allowed.test", 80)
    out["missing.allowed.test"] = "resolved"
except socket.gaierror:
    out["missing.allowed.test"] = "unresolved"
print(json.dumps(out))
"""


@contextlib.contextmanager
def scripted_dns(
    name: str, topology: Topology, workdir: Path, zone: dict[str, object]
) -> Iterator[JsonLines]:
    """The tests' DNS server (testbed/dns_server.py) on 127.0.0.1:53 of the proxy's
    namespace, answering from `zone`; yields its query log."""
    zone_file, log = workdir / f"{name}-zone.json", workdir / f"{name}-dns.jsonl"
    zone_file.write_text(json.dumps(zone))
    log.touch()
    argv = topology.exec_prefix(topology.ns_proxy) + [
        sys.executable, "-m", "testbed.dns_server", "--listen", "127.0.0.1:53",
        "--zone", str(zone_file), "--log", str(log),
    ]  # fmt: skip
    child = procs.start(f"{name}-dns", argv, workdir, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        procs.wait_until(
            "DNS server", lambda: "ready" in child.stdout.read_text(), timeout=15, child=child
        )
        yield JsonLines(log)
    finally:
        child.stop()


def probe_harness(topology: Topology, pki: Pki, upstreams: Upstreams) -> None:
    result = subprocess.run(
        topology.exec_prefix(topology.ns_proxy) + [sys.executable, "-c", PROBE, str(pki.ca_cert)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, f"harness probe failed:\n{result.stderr}"
    seen = json.loads(result.stdout)
    expected = {
        "api.allowed.test:443": "HTTP/1.1 200 OK",
        "other.allowed.test:80": "HTTP/1.1 200 OK",
        "x.wild.test:8443": "HTTP/1.1 200 OK",
        "198.18.1.2:443": "HTTP/1.1 200 OK",
        "rebind.test:80": "connected",
        "loop6.wild.test:443": "connected",
        "internal.test:443": "connected",
        "missing.allowed.test": "unresolved",
    }
    assert seen == expected, f"harness probe: {seen}"
    events = JsonLines(upstreams.log).all()
    snis = {e["sni"] for e in events if e["event"] == "request" and e["tls"]}
    assert {"api.allowed.test", "x.wild.test"} <= snis, events
    assert [e["listener"] for e in events if e["event"] == "trap"] == [f"{INTERNAL_IP}:443"]
    traps = JsonLines(upstreams.trap_log).all()
    assert sorted(e["listener"] for e in traps) == ["[::]:443", "[::]:80"], traps


@pytest.fixture(scope="session")
def e2e_secrets() -> tuple[str, str]:
    """(environment secret, file secret): distinctive values that must never leak."""
    return f"s3cr3t-e2e-{secrets.token_hex(8)}", f"f1le-s3cr3t-e2e-{secrets.token_hex(8)}"


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session", autouse=True)
def audit_validates_as_ocsf(e2e_dir: Path) -> Iterator[None]:
    """When the suite ends, every audit record any proxy of it wrote validates against
    the OCSF schema (issue 34): an `--audit-format ocsf` line as written, a JSON line as
    the OCSF event it would have been (testbed/ocsfschema.py; equal shapes once)."""
    yield
    found: list[str] = []
    for path in sorted(e2e_dir.rglob("*audit*.jsonl")):
        found += audit_file_problems(path)[1]
    assert not found, "audit records that are not valid OCSF:\n" + "\n".join(found[:20])


@pytest.fixture(scope="session")
def pki(e2e_dir: Path) -> Pki:
    directory = e2e_dir / "pki"
    directory.mkdir()
    return make_test_pki(directory, CERT_NAMES, [UPSTREAM_IP, INTERNAL_IP])


@pytest.fixture(scope="session")
def topology() -> Iterator[Topology]:
    reason = netns_available()
    if reason is not None:
        # `make test` runs as root (README); a missing prerequisite is a failure, not a skip.
        pytest.fail(f"end-to-end tests cannot run: {reason}")
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    topo = Topology(tag=f"egt{os.getpid()}")
    try:
        topo.build(PROXY_HOSTS)
        yield topo
    finally:
        failures = topo.close()
        signal.signal(signal.SIGTERM, previous)
        if failures:
            raise RuntimeError("topology cleanup failed:\n" + "\n".join(failures))


def _start_and_wait(name: str, argv: list[str], log_dir: Path, ready: Path) -> procs.Child:
    # A file an earlier start left (a module-scoped server started again by another
    # module, as test_upstream_retry_e2e starts the relay suite's) is not this one's.
    ready.unlink(missing_ok=True)
    child = procs.start(name, argv, log_dir)
    procs.wait_until(f"{name} ready", ready.exists, timeout=15, child=child)
    return child


# One definition, found here by every module: a session fixture imported into several
# test modules is a fixture per module, and the second one's server found the port taken.
@dataclass(frozen=True)
class Hostile:
    log: JsonLines

    def ended(self, mark: int, path: str) -> dict:
        return self.log.wait_for(mark, lambda e: e.get("path") == path, timeout=15)


@pytest.fixture(scope="session", name="hostile")
def hostile_fixture(topology: Topology, e2e_dir: Path) -> Iterator[Hostile]:
    log, ready = e2e_dir / "hostile.jsonl", e2e_dir / "hostile.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, *HOSTILE_SERVER, "--log", str(log), "--ready", str(ready),
        "--listen", f"{UPSTREAM_IP}:{HOSTILE_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("hostile-upstream", argv, e2e_dir, ready)
    try:
        yield Hostile(JsonLines(log))
    finally:
        child.stop()


@dataclass(frozen=True)
class Scripted:
    """testbed/script_server.py's upstreams of a module: their one log and script folder."""

    log: JsonLines
    scripts: Path


@contextlib.contextmanager
def script_upstreams(
    topology: Topology, pki: Pki, e2e_dir: Path, name: str, ports: dict[int, bool]
) -> Iterator[Scripted]:
    """testbed/script_server.py on UPSTREAM_IP at each port (TLS when its value is true),
    sharing one log (`NAME.jsonl`) and one script folder (`NAME-scripts`)."""
    log, scripts = e2e_dir / f"{name}.jsonl", e2e_dir / f"{name}-scripts"
    log.touch()
    scripts.mkdir(exist_ok=True)
    with contextlib.ExitStack() as stack:
        for port, tls in ports.items():
            ready = e2e_dir / f"{name}-{port}.ready"
            argv = topology.exec_prefix(topology.ns_upstream) + [
                sys.executable, "-m", "testbed.script_server", "--log", str(log),
                "--ready", str(ready), "--listen", f"{UPSTREAM_IP}:{port}",
                "--scripts", str(scripts),
            ]  # fmt: skip
            if tls:
                argv += ["--cert", str(pki.server_cert), "--key", str(pki.server_key)]
            child = _start_and_wait(f"{name}-{port}", argv, e2e_dir, ready)
            stack.callback(child.stop)
        yield Scripted(JsonLines(log), scripts)


@pytest.fixture(scope="session")
def upstreams(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Upstreams]:
    log, trap_log = e2e_dir / "upstream.jsonl", e2e_dir / "trap-proxy-ns.jsonl"
    log.touch()
    trap_log.touch()
    echo = [sys.executable, *ECHO_SERVER]
    children: list[procs.Child] = []
    try:
        children.append(
            _start_and_wait(
                "echo-upstream",
                topology.exec_prefix(topology.ns_upstream)
                + echo
                + ["--log", str(log), "--ready", str(e2e_dir / "echo.ready")]
                + ["--cert", str(pki.server_cert), "--key", str(pki.server_key)]
                + ["--echo", f"{UPSTREAM_IP}:80"]
                + ["--echo-tls", f"{UPSTREAM_IP}:443", "--echo-tls", f"{UPSTREAM_IP}:8443"]
                + ["--trap", f"{INTERNAL_IP}:80", "--trap", f"{INTERNAL_IP}:443"],
                e2e_dir,
                e2e_dir / "echo.ready",
            )
        )
        children.append(
            _start_and_wait(
                "trap-proxy-ns",
                topology.exec_prefix(topology.ns_proxy)
                + echo
                + ["--log", str(trap_log), "--ready", str(e2e_dir / "trap.ready")]
                + [w for port in TRAPPED for w in ("--trap", f"[::]:{port}")],
                e2e_dir,
                e2e_dir / "trap.ready",
            )
        )
        found = Upstreams(log, trap_log)
        probe_harness(topology, pki, found)
        yield found
    finally:
        for child in reversed(children):
            child.stop()


def write_config(path: Path, client_net: str, file_secret_path: Path) -> None:
    path.write_text(
        CONFIG.format(
            secret_env=SECRET_ENV,
            file_secret=file_secret_path,
            internal_ip=INTERNAL_IP,
            client_net=client_net,
        )
    )


def proxy_env(secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2E_")}
    env[SECRET_ENV] = secret
    return env


def create_ca(certs: Path) -> Path:
    result = subprocess.run(
        [str(EGRESS_PROXY), "ca", "--certs", str(certs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"egress-proxy ca failed: {result.stderr}"
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def harness(
    topology: Topology,
    upstreams: Upstreams,
    pki: Pki,
    e2e_dir: Path,
    e2e_secrets: tuple[str, str],
) -> Iterator[Harness]:
    secret, file_secret = e2e_secrets
    file_secret_path = e2e_dir / "plain-token.txt"
    file_secret_path.write_text(file_secret + "\n")
    config = e2e_dir / "egress.yaml"
    write_config(config, topology.client_net, file_secret_path)
    certs = e2e_dir / "certs"
    proxy_ca = create_ca(certs)
    audit = e2e_dir / "audit.jsonl"
    argv = topology.exec_prefix(topology.ns_proxy) + [
        str(EGRESS_PROXY),
        "run",
        "--config",
        str(config),
        "--listen",
        f"{topology.proxy_ip}:{PROXY_PORT}",
        "--metrics",
        f"{topology.proxy_ip}:{METRICS_PORT}",
        "--certs",
        str(certs),
        "--audit-log",
        str(audit),
        "--upstream-ca",
        str(pki.ca_cert),
        *(["--fast-path"] if FAST_PATH else []),
    ]
    child = procs.start("proxy", argv, e2e_dir, env=proxy_env(secret))
    h = Harness(
        proxy_host=topology.proxy_ip,
        proxy_port=PROXY_PORT,
        metrics_host=topology.proxy_ip,
        metrics_port=METRICS_PORT,
        client_ip=topology.client_ip,
        client_net=topology.client_net,
        proxy_ca=proxy_ca,
        upstream_log=JsonLines(upstreams.log),
        trap_log=JsonLines(upstreams.trap_log),
        audit_log=AuditLines(audit),
        proxy_stdout=child.stdout,
        proxy_stderr=child.stderr,
        secrets=e2e_secrets,
        trap_baseline=JsonLines(upstreams.trap_log).mark(),
        upstream_baseline=JsonLines(upstreams.log).mark(),
    )

    def healthy() -> bool:
        try:
            return h.healthz() == 200
        except OSError:
            return False

    try:
        procs.wait_until("proxy /healthz", healthy, timeout=30, child=child)
        yield h
        # This process's proxy, whichever process the leak tests ran on (D700).
        assert session_scan.problems(h) == {}, session_scan.problems(h)
    finally:
        child.stop()


@pytest.fixture
def obs(harness: Harness) -> Observed:
    """What reaches the upstream namespace and the traps during one test."""
    return Observed.start(harness)


@dataclass(frozen=True)
class Bulk:
    """The bulk upstream (testbed/bulk_server.py) in the upstream namespace."""

    log: JsonLines
    ns_upstream: str

    def stats(self) -> dict[str, int]:
        """Its counters, read from inside the upstream namespace (not through a proxy)."""
        sock = nsock.connect(self.ns_upstream, (UPSTREAM_IP, BULK_PORT), timeout=5)
        with Conn.over(sock) as conn:
            response = conn.request("GET", "/stats", [("Host", "x"), ("Connection", "close")])
        return json.loads(response.body)


@pytest.fixture(scope="session")
def bulk(topology: Topology, upstreams: Upstreams, pki: Pki, e2e_dir: Path) -> Iterator[Bulk]:
    log, ready = e2e_dir / "bulk.jsonl", e2e_dir / "bulk.ready"
    log.touch()
    argv = topology.exec_prefix(topology.ns_upstream) + [
        sys.executable, *BULK_SERVER, "--log", str(log), "--ready", str(ready),
        "--cert", str(pki.server_cert), "--key", str(pki.server_key),
        "--listen", f"{UPSTREAM_IP}:{BULK_PORT}", "--listen-tls", f"{UPSTREAM_IP}:{BULK_TLS_PORT}",
    ]  # fmt: skip
    child = _start_and_wait("bulk-upstream", argv, e2e_dir, ready)
    try:
        yield Bulk(JsonLines(log), topology.ns_upstream)
    finally:
        child.stop()


@dataclass(frozen=True)
class PrivateProxy:
    """A proxy of one test's own in the proxy namespace, and the sandbox's view of it."""

    process: ProxyProcess
    view: Harness

    def wait_idle(self, timeout: float = 15.0) -> None:
        """Wait (bounded) until no client connection is open in the proxy: for a proxy that
        tests share (`module_private_proxy`), what an earlier test left running (a reset, an
        upstream still writing) must not end, log or forward during the next one."""
        procs.wait_until(
            f"{self.process.child.name} without open connections",
            lambda: self.process.scrape().get(("egress_active_connections", ()), 0) == 0,
            timeout=timeout,
            child=self.process.child,
        )


# The proxy namespace's trap (what reaches the proxy's own host) listens on these: a
# private proxy never takes one (the 344th of a worker once met 8443 taken).
TRAPPED = (80, 443, 8443)
_private_ports = (n for n in itertools.count() if 8100 + n not in TRAPPED)


@contextlib.contextmanager
def _private_proxies(
    harness: Harness, topology: Topology, pki: Pki, e2e_dir: Path
) -> Iterator[Callable[..., PrivateProxy]]:
    """`start(name, config_text, *extra_args, wrapper=())`: a fresh `egress-proxy run` beside
    the session's, with the session CA and secrets, on ports of its own, run through
    `wrapper` (e.g. `prlimit --nofile=256`); every one stopped when the block ends."""
    started: list[ProxyProcess] = []

    def start(
        name: str, config_text: str, *extra: str, wrapper: tuple[str, ...] = ()
    ) -> PrivateProxy:
        n = next(_private_ports)
        port, metrics = 8100 + n, 9500 + n
        config = e2e_dir / f"{name}-{n}.yaml"
        config.write_text(config_text)
        process = start_proxy(
            f"{name}-{n}",
            [*topology.exec_prefix(topology.ns_proxy), *wrapper],
            EGRESS_PROXY,
            config,
            ["--listen", f"{topology.proxy_ip}:{port}"]
            + ["--metrics", f"{topology.proxy_ip}:{metrics}"]
            + ["--certs", str(e2e_dir / "certs"), "--upstream-ca", str(pki.ca_cert), *extra]
            + (["--fast-path"] if FAST_PATH else []),
            e2e_dir,
            proxy_env(harness.secrets[0]),
            lambda: socket.create_connection((topology.proxy_ip, metrics), timeout=5),
        )
        started.append(process)
        view = dataclasses.replace(
            harness,
            proxy_port=port,
            metrics_port=metrics,
            audit_log=AuditLines(process.audit),
            proxy_stdout=process.child.stdout,
            proxy_stderr=process.child.stderr,
            responses=[],
        )
        return PrivateProxy(process, view)

    try:
        yield start
    finally:
        for process in reversed(started):
            process.child.stop()


@pytest.fixture
def private_proxy(
    harness: Harness, topology: Topology, pki: Pki, e2e_dir: Path
) -> Iterator[Callable[..., PrivateProxy]]:
    """`_private_proxies`' `start`: proxies of one test's own, stopped when the test ends."""
    with _private_proxies(harness, topology, pki, e2e_dir) as start:
        yield start


@pytest.fixture(scope="module")
def module_private_proxy(
    harness: Harness, topology: Topology, pki: Pki, e2e_dir: Path
) -> Iterator[Callable[..., PrivateProxy]]:
    """`_private_proxies`' `start` for proxies a module's tests share (issue 49, D640):
    stopped when the module ends. Only for tests that need no fresh proxy state, or that
    reset (or wait out) what they depend on themselves."""
    with _private_proxies(harness, topology, pki, e2e_dir) as start:
        yield start


@pytest.fixture(params=[False, True], ids=["layers", "relay"])
def body_relay(request: pytest.FixtureRequest) -> bool:
    """A test that asks for it runs twice: `--body-relay` off (the default) and on (issue
    49), so that the relay can never answer differently from mitmproxy's layers."""
    return bool(request.param)


def relaying(start: Callable[..., PrivateProxy], on: bool) -> Callable[..., PrivateProxy]:
    """`private_proxy`'s `start`, with `--body-relay` when `on`: a module that overrides
    its `private_proxy` fixture with this runs each of its proxies both ways."""

    def start_relaying(name: str, config_text: str, *extra: str, **rest: Any) -> PrivateProxy:
        return start(name, config_text, *extra, *(["--body-relay"] if on else []), **rest)

    return start_relaying


@pytest.fixture(scope="module", params=[False, True], ids=["layers", "relay"])
def module_relaying(
    request: pytest.FixtureRequest, module_private_proxy: Callable[..., PrivateProxy]
) -> Callable[..., PrivateProxy]:
    """`module_private_proxy`'s `start`, `relaying` when the parameter is on: a module whose
    proxy fixtures start their proxies with it runs each of its tests against the relay off,
    then on, each proxy shared by that half of the module's tests."""
    return relaying(module_private_proxy, bool(request.param))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The leak scan reads everything the proxy ever wrote: run it after all other traffic.
    items.sort(key=lambda item: item.path.name == "test_leaks_e2e.py")


@pytest.fixture(scope="module")
def moto(topology: Topology, pki: Pki, e2e_dir: Path) -> Iterator[Moto]:
    """moto's server checking every SigV4 signature (testbed.moto), one per test module."""
    with start_moto(topology, pki, e2e_dir) as server:
        yield server


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis server of this test's own (testbed/redisserver.py): the shared state of
    two proxies (approvals' grants, model-API spending)."""
    server = start_redis(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=[False, True], ids=["layers", "fast"])
def fast_path(request: pytest.FixtureRequest) -> bool:
    """A test that asks for it runs twice: `--fast-path` off (the default) and on (issue
    49, D612), so that the fast path can never decide differently from mitmproxy's layers."""
    return bool(request.param)


def fast_pathing(start: Callable[..., PrivateProxy], on: bool) -> Callable[..., PrivateProxy]:
    """`private_proxy`'s `start`, with `--fast-path` when `on` (as `relaying` does for the
    body relay)."""

    def start_fast(name: str, config_text: str, *extra: str, **rest: Any) -> PrivateProxy:
        return start(name, config_text, *extra, *(["--fast-path"] if on else []), **rest)

    return start_fast
