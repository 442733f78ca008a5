"""The DNS responder (proxy/dns.py) on real UDP and TCP sockets on loopback.

The system resolver is replaced by a table (no query leaves this machine); every other
part is real: dnspython clients, the responder's sockets, its metrics.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from sandbox_egress.proxy.config.loader import parse
from sandbox_egress.proxy.dns import DnsMetrics, Responder, serve
from sandbox_egress.proxy.hosts import IPAddress
from sandbox_egress.proxy.policy import Policy

ALLOWLIST = [
    {"domain": "api.example.com"},
    {"domain": "*.pypi.example"},
    {"domain": "metadata.google.internal"},
]
ANSWERS = {
    "api.example.com": ["203.0.113.7", "2001:db8::7"],
    "files.pypi.example": ["203.0.113.8"],
    "metadata.google.internal": ["169.254.169.254"],
}


class Table:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, name: str, port: int) -> list[IPAddress]:
        self.asked.append(name)
        if name == "broken.pypi.example":
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return [ipaddress.ip_address(a) for a in ANSWERS.get(name, [])]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Running:
    def __init__(self, allowlist: list[dict[str, Any]]) -> None:
        config = parse({"network": {"allowlist": allowlist}}, "env.yaml", {})
        self.table = Table()
        self.metrics = DnsMetrics()
        self.responder = Responder(Policy(config), self.table, self.metrics)
        self.port = free_port()

    def count(self, result: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "egress_dns_queries_total", {"result": result}
        )
        return value or 0.0


@pytest.fixture
def dns_server() -> Iterator[Running]:
    """The responder's own event loop in a thread, as in `egress-proxy dns`."""
    running = Running(ALLOWLIST)
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(
            serve(running.responder, "127.0.0.1", running.port, stop, ready.set)
        )

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(5)
    try:
        yield running
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
        loop.close()


def ask(running: Running, name: str, rdtype: str = "A", tcp: bool = False) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, "127.0.0.1", timeout=5, port=running.port)


def addresses(response: dns.message.Message) -> list[str]:
    return sorted(r.to_text() for rrset in response.answer for r in rrset)


def test_an_allowed_name_is_resolved_and_answered(dns_server: Running) -> None:
    a = ask(dns_server, "API.Example.com.")
    aaaa = ask(dns_server, "api.example.com", "AAAA", tcp=True)
    assert (a.rcode(), addresses(a)) == (dns.rcode.NOERROR, ["203.0.113.7"])
    assert (aaaa.rcode(), addresses(aaaa)) == (dns.rcode.NOERROR, ["2001:db8::7"])
    assert a.answer[0].ttl == 5
    assert dns_server.table.asked == ["api.example.com", "api.example.com"]
    assert dns_server.count("answered") == 2


@pytest.mark.parametrize(
    "name",
    ["notlisted.example", "pypi.example", "x.api.example.com", "localhost", "a.localhost",
     "exfiltrated-data.evil.test"],
)  # fmt: skip
def test_a_name_no_entry_could_allow_is_refused_and_never_resolved(
    dns_server: Running, name: str
) -> None:
    response = ask(dns_server, name)
    assert (response.rcode(), response.answer) == (dns.rcode.REFUSED, [])
    assert dns_server.table.asked == []
    assert dns_server.count("refused") == 1


def test_wildcards_and_other_record_types(dns_server: Running) -> None:
    assert addresses(ask(dns_server, "files.pypi.example")) == ["203.0.113.8"]
    txt = ask(dns_server, "files.pypi.example", "TXT")
    assert (txt.rcode(), txt.answer) == (dns.rcode.NOERROR, [])  # nothing but addresses
    assert dns_server.table.asked == ["files.pypi.example"]


def test_a_resolver_failure_is_servfail(dns_server: Running) -> None:
    response = ask(dns_server, "broken.pypi.example")
    assert response.rcode() == dns.rcode.SERVFAIL
    assert dns_server.count("failed") == 1


def test_a_datagram_that_is_not_dns_is_dropped_and_counted(dns_server: Running) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        raw.settimeout(0.5)
        raw.sendto(b"\x00\x01not a dns message", ("127.0.0.1", dns_server.port))
        with pytest.raises(TimeoutError):
            raw.recvfrom(512)
    assert dns_server.count("malformed") == 1
    assert addresses(ask(dns_server, "api.example.com")) == ["203.0.113.7"]


def test_metadata_names_only_through_an_exact_entry() -> None:
    wildcard = Running([{"domain": "*"}, {"domain": "*.google.internal"}])
    config = parse({"network": {"allowlist": ALLOWLIST}}, "env.yaml", {})
    exact = Responder(Policy(config), Table(), DnsMetrics())
    query = dns.message.make_query("metadata.google.internal", "A").to_wire()
    refused = dns.message.from_wire(asyncio.run(wildcard.responder.answer(query)) or b"")
    answered = dns.message.from_wire(asyncio.run(exact.answer(query)) or b"")
    assert refused.rcode() == dns.rcode.REFUSED
    assert (answered.rcode(), addresses(answered)) == (dns.rcode.NOERROR, ["169.254.169.254"])


def test_the_command_refuses_and_reports_health(tmp_path: Path) -> None:
    config = tmp_path / "env.yaml"
    config.write_text("network:\n  allowlist:\n    - domain: api.example.com\n")
    port, metrics = free_port(), free_port()
    egress_proxy = Path(sys.executable).parent / "egress-proxy"
    child = subprocess.Popen(
        [str(egress_proxy), "dns", "--config", str(config), "--listen", f"127.0.0.1:{port}",
         "--metrics", f"127.0.0.1:{metrics}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        response = None
        while response is None and time.monotonic() < deadline:
            try:
                query = dns.message.make_query("notlisted.example", "A")
                response = dns.query.udp(query, "127.0.0.1", timeout=0.5, port=port)
            except (dns.exception.Timeout, OSError):
                time.sleep(0.1)
        assert response is not None, child.stderr.read1().decode() if child.stderr else ""
        assert response.rcode() == dns.rcode.REFUSED
    finally:
        child.terminate()
        assert child.wait(10) == 0


# The child's system resolver is a table: the allowed name never reaches a real resolver.
TABLE_CHILD = """
import ipaddress, sys
import sandbox_egress.proxy.resolver
async def table(name, port):
    return [ipaddress.ip_address("203.0.113.7")] if name == "api.example.com" else []
sandbox_egress.proxy.resolver.threaded_resolve = lambda threads: table
from sandbox_egress.runtime.cli import main
sys.exit(main(sys.argv[1:]))
"""


def ask_until_up(port: int, name: str, child: subprocess.Popen[bytes]) -> dns.message.Message:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and child.poll() is None:
        try:
            return dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", timeout=0.5,
                                 port=port)  # fmt: skip
        except (dns.exception.Timeout, OSError):
            time.sleep(0.1)
    raise AssertionError(child.stderr.read1().decode() if child.stderr else "no answer")


@pytest.mark.parametrize(
    "reference",
    ["Bearer ${DNS_TEST_UNSET_TOKEN}", "${file:/nonexistent/dnssecret/token}", "${file:FIFO}"],
)
def test_the_command_answers_without_the_secrets_its_transforms_reference(
    tmp_path: Path, reference: str
) -> None:
    # A FIFO without a writer: opening it to read blocks forever, so answering proves that
    # the responder never opened it (root reads a chmod 0 file; a FIFO it cannot).
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    config = tmp_path / "env.yaml"
    config.write_text(
        "network:\n  allowlist:\n    - domain: api.example.com\n"
        f"      transform:\n        Authorization: '{reference.replace('FIFO', str(fifo))}'\n"
    )
    port, metrics = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "DNS_TEST_UNSET_TOKEN"}
    child = subprocess.Popen(
        [sys.executable, "-c", TABLE_CHILD, "dns", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        allowed = ask_until_up(port, "api.example.com", child)
        other = ask_until_up(port, "notlisted.example", child)
        assert (allowed.rcode(), addresses(allowed)) == (dns.rcode.NOERROR, ["203.0.113.7"])
        assert (other.rcode(), other.answer) == (dns.rcode.REFUSED, [])
        # A reload does not look the references up either: the renamed entry takes over.
        config.write_text(config.read_text().replace("api.example.com", "api2.example.com"))
        child.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while ask_until_up(port, "api.example.com", child).rcode() != dns.rcode.REFUSED:
            assert time.monotonic() < deadline, "the reload was refused"
            time.sleep(0.1)
        renamed = ask_until_up(port, "api2.example.com", child)
        assert (renamed.rcode(), renamed.answer) == (dns.rcode.NOERROR, [])
    finally:
        child.terminate()
        assert child.wait(10) == 0
    stderr = child.stderr.read().decode() if child.stderr else ""
    assert "refused" not in stderr


def test_one_client_cannot_hold_every_tcp_connection(dns_server: Running):
    # issue 21: idle TCP connections of one client were held without limit (10 s each).
    from sandbox_egress.proxy.dns import TCP_CONNECTIONS

    idle = [
        socket.create_connection(("127.0.0.1", dns_server.port), timeout=5)
        for _ in range(TCP_CONNECTIONS.per_client)
    ]
    try:
        with socket.create_connection(("127.0.0.1", dns_server.port), timeout=5) as extra:
            assert extra.recv(1) == b""  # closed at once
        refused = dns_server.metrics.registry.get_sample_value(
            "egress_bound_hits_total", {"bound": "connections_per_client", "outcome": "refused"}
        )
        assert refused == 1.0
    finally:
        for sock in idle:
            sock.close()
    # A closed connection gives its slot back: the same client is served over TCP again.
    deadline = time.monotonic() + 10
    while True:
        try:
            assert addresses(ask(dns_server, "api.example.com", tcp=True)) == ["203.0.113.7"]
            break
        except (EOFError, ConnectionError):
            assert time.monotonic() < deadline  # the server has not seen the closes yet
